"""ipusim: a cycle-approximate discrete-event simulator of the Graphcore IPU."""

__version__ = "0.1.0"
