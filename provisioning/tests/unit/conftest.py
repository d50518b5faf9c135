import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PROVISIONING = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(PROVISIONING, "module_utils"))
sys.path.insert(0, os.path.join(PROVISIONING, "filter_plugins"))


def fixture(name):
    with open(os.path.join(HERE, "fixtures", name)) as f:
        return f.read()
