"""The kit's commands, one module each: a docstring (its help), ``add_arguments(parser)`` and
``run(args, ws)``: ws is the Workspace (scripts/workspace.py) it acts on.

The front door (scripts/__main__.py) lists them in pipeline order; the nox sessions call them. A
command module only wires the workspace's paths, pin and series into the stage modules that do the
work.
"""
