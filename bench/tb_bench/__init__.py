"""The benchmark behind bench/bench.py (`make bench`); see that file for the layout."""
