"""The capstone training-ingest lab (``make lab``): the hidden buffers, measured, and the push fix.

:mod:`.workload` (photos decoded and augmented, a small CNN, the consumers) and :mod:`.photos`
(the data); :mod:`.variants` (which runs); :mod:`.session` (the lab's cluster, and one run);
:mod:`.epoch` (one epoch's measures); :mod:`.model_check` (the simulator against the lab);
:mod:`.buffer_model` (the hidden batches predicted from the installed Ray);
:mod:`.report` (tables and checks) and :mod:`.plots` (figures); :mod:`.__main__` (the command).
"""
