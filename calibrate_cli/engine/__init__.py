"""The one pass: validated predictions → per-sample quantities and per-bin sums.

Binning (:mod:`.binning`), the summary pass (:mod:`.summary`), its per-chunk engines (:mod:`.kernels`:
numpy and the compiled loop; :mod:`.torch_pass` and :mod:`.device_eval` on a torch device), order
statistics (:mod:`.sorting`), and the ways to run it over data that does not fit one array (:mod:`.stream`,
:mod:`.shards`, :mod:`.parallel`). Nothing here reads files or prints.
"""
