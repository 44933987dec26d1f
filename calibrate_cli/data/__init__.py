"""Files → validated predictions: the input formats (:mod:`.io` and one module per family), the checks
that turn arrays into :class:`~calibrate_cli.data.predictions.Predictions`, softmax
(:mod:`.probabilities`), and how numbers are read from text (:mod:`.number_text`)."""
