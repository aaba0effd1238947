"""Bad task arguments raise ValueError naming the argument and the bound that failed."""

from __future__ import annotations

import pytest

from loglinear.synthetics import TASKS, get_task

BAD = [
    ("mqar", {"seq_len": 16, "num_kv_pairs": 5}, r"4 \* num_kv_pairs <= seq_len, got 4 \* 5 = 20 > seq_len = 16"),
    ("mqar", {"seq_len": 64, "num_kv_pairs": [2, 17]}, r"4 \* num_kv_pairs <= seq_len"),
    ("mqar", {"vocab_size": 8, "seq_len": 64, "num_kv_pairs": 4}, r"vocab_size = 8 has only 3 keys.*vocab_size >= 10"),
    ("mqar", {"num_kv_pairs": 0}, r"num_kv_pairs must be >= 1, got 0"),
    ("mqar", {"num_kv_pairs": []}, r"num_kv_pairs must be an integer or a non-empty list"),
    ("mqar", {"num_kv_pairs": [4, 2.5]}, r"num_kv_pairs\[1\] must be an integer"),
    ("mqar", {"vocab_size": 3}, r"vocab_size must be >= 4, got 3"),
    ("mqar", {"seq_len": 2}, r"seq_len must be >= 4, got 2"),
    ("mqar", {"power_a": float("nan")}, r"power_a must be a finite number"),
    ("mqar", {"random_non_queries": 1}, r"random_non_queries must be true or false"),
    ("mqar", {"seq_len": True}, r"seq_len must be an integer, got True"),
    ("mqar", {"num_pairs": 4},
     r"unknown argument\(s\) \['num_pairs'\] for task 'mqar'; valid: \['layout', 'num_kv_pairs'"),
    ("parity", {"seq_len": 0}, r"seq_len must be >= 1, got 0"),
    ("parity", {"scored": "first"}, r"scored must be one of \['every', 'last'\], got 'first'"),
    ("cycle_nav", {"cycle_length": 1}, r"cycle_length must be >= 2, got 1"),
    ("mod_arith", {"seq_len": 7}, r"seq_len must be even, got 7"),
    ("mod_arith", {"modulus": 1}, r"modulus must be >= 2, got 1"),
    ("mod_arith_brackets", {"seq_len": 8}, r"task 'mod_arith_brackets' needs argument\(s\) \['mult'\]"),
    ("mod_arith_brackets", {"seq_len": 8, "mult": "yes"}, r"mult must be true or false"),
    ("s5", {"seq_len": -3}, r"seq_len must be >= 1, got -3"),
    ("a5", {"group": "A5"}, r"unknown argument\(s\) \['group'\] for task 'a5'; valid: \['scored', 'seq_len'\]"),
    ("s3", {"scored": "all"}, r"scored must be one of \['every', 'last'\], got 'all'"),
    ("flip_flop", {"p_ignore": 1.5}, r"p_ignore must be <= 1.0, got 1.5"),
    ("flip_flop", {"seq_len": 2}, r"seq_len must be >= 4, got 2"),
    ("flip_flop", {"seq_len": 9}, r"seq_len must be even, got 9"),
    ("sorting", {}, r"unknown task 'sorting'; valid: mqar, parity, cycle_nav"),
]


@pytest.mark.parametrize(("name", "kwargs", "message"), BAD)
def test_bad_arguments_raise_with_the_bound(name, kwargs, message):
    with pytest.raises(ValueError, match=message):
        get_task(name, **kwargs)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_bad_sample_arguments_raise(name):
    task = get_task(name, mult=True) if name == "mod_arith_brackets" else get_task(name)
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        task.sample(0, 0)
    with pytest.raises(ValueError, match="seed must be an integer"):
        task.sample(2, 1.5)


def test_a_task_by_its_import_path_and_a_path_that_is_not_a_task():
    task = get_task("loglinear.synthetics.parity:Parity", seq_len=8)
    assert type(task) is TASKS["parity"]
    with pytest.raises(ValueError, match="task 'loglinear.synthetics.config:DataConfig' is not a subclass of Task"):
        get_task("loglinear.synthetics.config:DataConfig")
    with pytest.raises(ValueError, match="task 'nowhere:Task': cannot import it"):
        get_task("nowhere:Task")
