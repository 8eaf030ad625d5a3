"""The results' vocabulary, what the terminal (cli/) and the HTML page (html/) both say of a sweep's results:
the cfg keys that vary and their values' spelling, why a cell failed, where the hours went, who won."""
