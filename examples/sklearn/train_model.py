"""Fit a small scikit-learn classifier to the iris flowers (a data set shipped inside scikit-learn) and save it with
skops, a format that holds the model's data and no code: the sklearn engine loads it with `skops.io.load`.

    .venv/bin/python examples/sklearn/train_model.py [OUTPUT]     # default: sklearn-model.skops beside this script
"""

import sys
from pathlib import Path

import skops.io
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression

output = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("sklearn-model.skops")

# 150 flowers, four measurements each (sepal length and width, petal length and width, in cm), three species
features, species = load_iris(return_X_y=True)
model = LogisticRegression(max_iter=1000).fit(features, species)

skops.io.dump(model, output)
print(f"saved {output} (training accuracy {model.score(features, species):.2f})")
