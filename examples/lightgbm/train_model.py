"""Train a small LightGBM classifier on the iris flowers (a data set shipped inside scikit-learn) and save it in
LightGBM's text format, which the lightgbm engine loads with `lightgbm.Booster(model_file=...)`.

    .venv/bin/python examples/lightgbm/train_model.py [OUTPUT]     # default: lgbm-model.txt beside this script
"""

import sys
from pathlib import Path

import lightgbm as lgb
from sklearn.datasets import load_iris

output = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("lgbm-model.txt")

features, species = load_iris(return_X_y=True)
params = {"objective": "multiclass", "num_class": 3, "min_data_in_leaf": 5, "seed": 0, "num_threads": 1, "verbose": -1}
booster = lgb.train(params, lgb.Dataset(features, label=species), num_boost_round=20)

booster.save_model(output)
accuracy = (booster.predict(features).argmax(axis=1) == species).mean()
print(f"saved {output} (training accuracy {accuracy:.2f})")
