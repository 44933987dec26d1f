"""Files → validated predictions, and results → files.

Reading: :mod:`.io` (the loaders and the registry of input formats), what a format is
(:mod:`.formats`), one module per family (:mod:`.csvfile` with its C-speed path :mod:`.csvfast`,
:mod:`.tables`, :mod:`.arrays`) and the column rules CSV and tables share (:mod:`.columns`). Then the
checks that turn arrays into :class:`~calibrate_cli.data.predictions.Predictions`, softmax
(:mod:`.probabilities`), how numbers are read from text (:mod:`.number_text`) and how mapped pages are
given back (:mod:`.pages`). Writing: :mod:`.outputs` (atomic writes, output-path checks)."""
