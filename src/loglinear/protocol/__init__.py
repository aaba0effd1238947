"""The protocol: what a sweep trains next and what it picks. Each cell's pick on its selection runs
(results.py) and how stable it is (stability.py), the grid extension beyond an edge pick (extension.py) to every
cell it is compared with (compared.py), the confirmation runs at the picks (confirmation.py), and whether a
spec's design can conclude before anything runs (power.py). sweeps/ runs the runs; reports/ reads them and writes
the report."""
