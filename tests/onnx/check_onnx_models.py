"""onnx's checker on every model given: onnx.checker.check_model(model, full_check=True), which
also runs ONNX shape inference. Exits 1 naming each model that fails.

    /usr/bin/python3 check_onnx_models.py MODEL.onnx...
"""
import sys

import onnx

failed = []
for path in sys.argv[1:]:
    try:
        onnx.checker.check_model(onnx.load(path), full_check=True)
        print(f"ok {path}")
    except Exception as e:  # the checker raises several exception types
        print(f"FAIL {path}: {e}")
        failed.append(path)
if not sys.argv[1:]:
    print("FAIL: no model given")
    sys.exit(1)
sys.exit(1 if failed else 0)
