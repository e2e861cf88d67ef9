"""The cure as an artifact, and the mitigations compared: ``popaudit mitigate``
(:mod:`~auditor.mitigation.run`, ``--alpha auto`` in :mod:`~auditor.mitigation.auto`),
its writers by the table of model formats (:mod:`~auditor.mitigation.writers`): the
rescaling rule in row blocks (:mod:`~auditor.mitigation.rescale`), ``.npy``/Parquet/
safetensors tables (:mod:`~auditor.mitigation.tables`), PyTorch files
(:mod:`~auditor.mitigation.torch_file`) and RecBole checkpoints
(:mod:`~auditor.mitigation.recbole_file`); and the ``experiment mitigations`` grid
(:mod:`~auditor.mitigation.experiment`)."""
