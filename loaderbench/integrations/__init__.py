"""loaderbench inside training frameworks: each module imports its framework, so import the one
you use (the base package never imports them).

- `loaderbench.integrations.lightning.LoaderbenchCallback`: a PyTorch Lightning `Callback`
  (`pip install "loaderbench[lightning]"`).
- `loaderbench.integrations.hf.LoaderbenchTrainerCallback`: a Hugging Face `TrainerCallback`
  (`pip install "loaderbench[hf]"`).
- TensorBoard needs no module here: `loaderbench.watch(loader, tensorboard=SummaryWriter(...))`
  (`pip install "loaderbench[tensorboard]"`).
"""
