"""The benchmarks and device checks, each run from the checkout as ``python -m bench.NAME``
(``bench/README.md`` lists which is which and the result file each writes)."""
