# The environment every device script shares, sourced from the repository root after the script's own
# PYTHONPATH: unbuffered output, W&B quiet, Hugging Face offline (the device reaches nothing outside), the
# kernel cache under /tmp unless PTXFORGE_CACHE says otherwise, and the CUDA tools on PATH where the image has them.
# WANDB_MODE stays with each script (some force offline, some keep a caller's choice).
export PYTHONUNBUFFERED=1 WANDB_SILENT=true HF_HUB_OFFLINE=1
export PTXFORGE_CACHE=${PTXFORGE_CACHE:-/tmp/ptxforge-cache}
if [ -d /usr/local/cuda/bin ]; then export PATH=$PATH:/usr/local/cuda/bin; fi
# The QuACK stack, once scripts/install_quack.sh has unpacked it (it stays while the machine is up): every script
# then times QuACK beside the other libraries (its wheels' .pth is not read from a PYTHONPATH dir, hence dsl_packages).
QUACK_SITE=${QUACK_SITE:-/tmp/quack-site}
if [ -f "$QUACK_SITE/.unpacked" ]; then
  export PYTHONPATH=$PYTHONPATH:$QUACK_SITE:$QUACK_SITE/nvidia_cutlass_dsl/dsl_packages
fi
