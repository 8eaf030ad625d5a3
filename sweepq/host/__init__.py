"""What every process of a sweep meets on its machine: signals, a parent's death, the kernel's OOM kills,
a full disk, bounded logs, the tail of a file. Each module here serves the worker, the attempt and the
program alike, and imports none of their packages.
"""
