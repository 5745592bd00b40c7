"""threadwise: train thread-level scheduling profiles for Linux workloads."""

__version__ = "0.1.0"
