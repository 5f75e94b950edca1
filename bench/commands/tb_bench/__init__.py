"""The benchmark behind bench/commands/bench.py (`make bench`); see that file for the layout."""
