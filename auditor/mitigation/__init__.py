"""The writers behind ``popaudit mitigate`` (:mod:`auditor.mitigate`): the rescaling rule
in row blocks (:mod:`~auditor.mitigation.rescale`), ``.npy``/Parquet/safetensors tables
(:mod:`~auditor.mitigation.tables`) and PyTorch files (:mod:`~auditor.mitigation.torch_file`)."""
