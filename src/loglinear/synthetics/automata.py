"""Random deterministic finite automata as RegBench draws them (Akyürek, Wang, Kim, Andreas 2024, "In-Context
Language Learning: Architectures and Algorithms", code berlino/seq_icl `src/dataloaders/dfa.py`), a batch at a time,
and the identity of the language each one accepts.

Every state accepts, so an automaton's language is the set of strings it has a path for, and its probabilistic
version picks each next symbol uniformly among the current state's outgoing edges: the strings' distribution is a
function of the language alone (two states with the same future language have the same outgoing symbols).
`language_key` names that language by its minimal automaton, numbered in the order a breadth-first walk from the
start state meets its states, so that two automata with one language have one key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from loglinear.synthetics.seeding import derive_seed


@dataclass(frozen=True)
class Automata:
    """A batch of automata over symbols 0 .. A-1, start state 0: state s of row b has `counts[b, s]` outgoing edges,
    edge e < counts[b, s] reading `symbols[b, s, e]` into `targets[b, s, e]` (entries past the count are unused);
    `states[b]` states (rows of `counts` past it are 0)."""

    symbols: Tensor  # (B, S, E) int64
    targets: Tensor  # (B, S, E) int64
    counts: Tensor  # (B, S) int64
    states: Tensor  # (B,) int64

    def allowed(self) -> Tensor:
        """(B, S) int64: per state, the bitmask of the symbols it has an edge for (bit a: symbol a)."""
        used = torch.arange(self.symbols.shape[2]) < self.counts[..., None]
        return ((1 << self.symbols) * used).sum(dim=2)

    def rows(self, which: Tensor) -> Automata:
        return Automata(self.symbols[which], self.targets[which], self.counts[which], self.states[which])


def sample_automata(rows: int, states: tuple[int, int], alphabet: tuple[int, int], symbols: int, max_edges: int,
                    generator: torch.Generator) -> Automata:
    """`rows` automata as RegBench draws each: a number of states uniform in `states` (inclusive), an alphabet of a
    size uniform in `alphabet` (inclusive), a uniform subset of the `symbols` symbols; every state gets a number of
    outgoing edges uniform in 1 .. max_edges, on distinct symbols of the alphabet (a uniform subset), into distinct
    states other than itself (a uniform subset)."""
    most = states[1]
    counts_of_states = torch.randint(states[0], most + 1, (rows,), generator=generator)
    sizes = torch.randint(alphabet[0], alphabet[1] + 1, (rows,), generator=generator)
    alphabets = torch.rand(rows, symbols, generator=generator).argsort(dim=1)  # the first `size` are the alphabet
    picks = torch.rand(rows, most, symbols, generator=generator)
    picks.masked_fill_(torch.arange(symbols) >= sizes[:, None, None], 2.0)
    edge_symbols = alphabets.gather(1, picks.argsort(dim=2)[..., :max_edges].reshape(rows, -1)).view(rows, most, -1)
    into = torch.rand(rows, most, most, generator=generator)
    state = torch.arange(most)
    into.masked_fill_((state >= counts_of_states[:, None, None]) | (state[:, None] == state), 2.0)
    edge_targets = into.argsort(dim=2)[..., :max_edges]
    counts = torch.randint(1, max_edges + 1, (rows, most), generator=generator)
    counts.masked_fill_(state >= counts_of_states[:, None], 0)
    return Automata(edge_symbols, edge_targets, counts, counts_of_states)


def language_key(symbols: Sequence[Sequence[int]], targets: Sequence[Sequence[int]], counts: Sequence[int]) -> int:
    """A 64-bit key of the language of one automaton (lists per state of its edges' symbols and targets, and its
    counts of edges): the same for every automaton that accepts the same strings."""
    edges = [dict(zip(symbols[s][: counts[s]], targets[s][: counts[s]], strict=True)) for s in range(len(counts))]
    reachable, frontier = {0}, [0]
    while frontier:
        for nxt in edges[frontier.pop()].values():
            if nxt not in reachable:
                reachable.add(nxt)
                frontier.append(nxt)
    # Moore's refinement: states that read the same symbols into the same classes share a class.
    block = dict.fromkeys(reachable, 0)
    while True:
        signatures = {s: (block[s], *sorted((a, block[t]) for a, t in edges[s].items())) for s in reachable}
        names = {signature: i for i, signature in enumerate(sorted(set(signatures.values())))}
        refined = {s: names[signatures[s]] for s in reachable}
        if len(names) == len(set(block.values())):
            break
        block = refined
    # The minimal automaton, its classes numbered as a breadth-first walk from the start meets them.
    number, order = {block[0]: 0}, [0]
    words: list[int] = []
    for s in order:  # `order` grows while it is read: one representative state per class
        row = []
        for a, t in sorted(edges[s].items()):
            if block[t] not in number:
                number[block[t]] = len(number)
                order.append(t)
            row += [a, number[block[t]]]
        words += [len(row) // 2, *row]
    return derive_seed(len(order), *words)


def walk(automata: Automata, lengths: Tensor, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Strings of the automata: `lengths` (B, W) symbols per string, each string a walk from the start state that
    picks every next symbol uniformly among the current state's edges. Returns (symbols, allowed), both (B, W, L)
    for L = the longest length: the symbol read and the bitmask of the symbols the state before it allows (both 0
    past a string's length)."""
    rows, strings = lengths.shape
    longest = int(lengths.max())
    masks = automata.allowed()
    row = torch.arange(rows)[:, None].expand(rows, strings)
    state = torch.zeros(rows, strings, dtype=torch.int64)
    counts = automata.counts[row, state]
    uniform = torch.rand(rows, strings, longest, generator=generator)
    read = torch.zeros(rows, strings, longest, dtype=torch.int64)
    allowed = torch.zeros(rows, strings, longest, dtype=torch.int64)
    for i in range(longest):
        live = lengths > i
        edge = (uniform[..., i] * counts).long()
        read[..., i] = torch.where(live, automata.symbols[row, state, edge], 0)
        allowed[..., i] = torch.where(live, masks[row, state], 0)
        state = automata.targets[row, state, edge]
        counts = automata.counts[row, state]
    return read, allowed
