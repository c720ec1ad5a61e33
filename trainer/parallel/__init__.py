"""How ranks share the work: the rank grid (groups and communicators) and sequence parallelism.

Data-parallel gradient strategies live in trainer/dp.py; they run on the grid's gradient communicator."""
