"""Fit a small scikit-learn classifier to made-up data (three features, two classes, a fixed seed) and save it with
skops (the model's data, no code). The custom example's Preprocess loads it itself, in its own `load()`.

    .venv/bin/python examples/custom/train_model.py [OUTPUT]     # default: custom-model.skops beside this script
"""

import sys
from pathlib import Path

import skops.io
from sklearn.datasets import make_classification
from sklearn.ensemble import RandomForestClassifier

output = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("custom-model.skops")

features, labels = make_classification(
    n_samples=300, n_features=3, n_informative=3, n_redundant=0, class_sep=2.0, random_state=7
)
model = RandomForestClassifier(n_estimators=25, max_depth=4, random_state=7).fit(features, labels)

skops.io.dump(model, output)
print(f"saved {output} (training accuracy {model.score(features, labels):.2f})")
