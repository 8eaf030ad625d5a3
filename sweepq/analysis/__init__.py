"""What the results of a sweep say: the grid analysis (marginal means per cfg value) and its picture."""
