"""The venv holds the collections requirements.yml names, at those versions or newer."""
import json
import os
import subprocess

import yaml

from conftest import PROVISIONING


def _version(v):
    return tuple(int(x) for x in v.split("."))


def test_requirements_collections_installed():
    with open(os.path.join(PROVISIONING, "requirements.yml")) as f:
        wanted = yaml.safe_load(f)["collections"]
    out = subprocess.run(["ansible-galaxy", "collection", "list", "--format", "json"],
                         capture_output=True, text=True, check=True, cwd=PROVISIONING).stdout
    installed = {}
    for path_content in json.loads(out).values():
        for name, info in path_content.items():
            installed[name] = info["version"]
    assert wanted
    for item in wanted:
        name, spec = item["name"], item["version"]
        assert spec.startswith(">="), spec
        assert name in installed, "%s not in the venv" % name
        assert _version(installed[name]) >= _version(spec[2:]), (name, installed[name], spec)
