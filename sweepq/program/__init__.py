"""A `program:` cell's supervisor, in the attempt process: its program's launch, watching it, its end."""
