"""Distributed primitives the global stages are built from: shuffle by key, MinHash, connected components.

Each kernel is collective over an mpi4py communicator and gives the same result on any number of ranks.
"""
