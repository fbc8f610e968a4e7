"""Train a small XGBoost classifier on the iris flowers (a data set shipped inside scikit-learn) and save the booster
in XGBoost's JSON format, which the xgboost engine loads with `xgboost.Booster().load_model`.

    .venv/bin/python examples/xgboost/train_model.py [OUTPUT]     # default: xgb-model.json beside this script
"""

import sys
from pathlib import Path

import xgboost as xgb
from sklearn.datasets import load_iris

output = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("xgb-model.json")

features, species = load_iris(return_X_y=True)
params = {"objective": "multi:softprob", "num_class": 3, "max_depth": 3, "eta": 0.3, "seed": 0, "nthread": 1}
booster = xgb.train(params, xgb.DMatrix(features, label=species), num_boost_round=20)

booster.save_model(output)
accuracy = (booster.predict(xgb.DMatrix(features)).argmax(axis=1) == species).mean()
print(f"saved {output} (training accuracy {accuracy:.2f})")
