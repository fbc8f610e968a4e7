"""Model monitoring: declared custom statistics (clearml-serving's `metrics add`), built-in input and output
statistics, and drift detection against each version's reference distribution."""
