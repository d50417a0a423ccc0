"""The browser playground: a JupyterLite site that runs the simulator (:mod:`raydata_course.sim`).

:mod:`.site` builds it offline from PyPI and the npm registry (``make playground``);
``python -m raydata_course.playground`` is the command. The notebooks live in the course's
``playground/`` folder, with the lab results the simulator is checked against.
"""
