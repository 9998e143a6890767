"""The LingBot-World realtime benchmark on Ascend: independent server+bench runs, md5 determinism, the
band."""

from __future__ import annotations

import argparse
import os

from scripts.commands.common import checkout_lock
from scripts.e2e import ab, install, lock, preflight
from scripts.e2e import config as e2e_config
from scripts.e2e import run as e2e_run
from scripts.workspace import Workspace


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = "KIT_E2E_<NAME> is read only where named; a flag wins over it, an empty variable counts as unset."
    e2e_config.add_options(p)  # declared once there (OPTIONS), with the rule each value must meet


def run(args: argparse.Namespace, ws: Workspace) -> int:
    config = e2e_config.config_of(ws, args, os.environ)  # every value checked before anything waits
    # the server and upstream's client run the checkout's code: it stays put
    with checkout_lock(ws, shared=True):
        # Setup errors are KitErrors and signals KeyboardInterrupts: the front door reports both in
        # one line.
        python = install.base_python(config.python) if config.mode == "ascend" else None
        checks = preflight.run(ws, config, python)
        with lock.hold_cards(e2e_run.locked_cards(config), config.lock_dir, config.lock_wait_s):
            return (ab.execute if config.ab else e2e_run.execute)(ws, config, python, checks)
