"""Trace files: `torch.profiler` traces recorded elsewhere (Chrome trace-event JSON, `.json`
or `.json.gz`), read into the measured-run value every source produces (gobrrr.run).

read.py      the file: opening (gzip by magic number), one-line errors, the header
columns.py   the events of a trace of any size streamed (ijson) into numpy columns
steps.py     the profiled steps: counted ops, kernels, spans -> one averaged step
opcount.py   FLOPs and bytes of a recorded op: its inputs rebuilt as meta tensors
flow.py      which op read which op's output, guessed from shapes in call order
ceilings.py  the ceilings a trace is judged by: this machine's calibration, else the
             datasheet of the GPU the trace names
analysis.py  one trace -> its averaged step, ceilings and notes (analyze's source)
"""
