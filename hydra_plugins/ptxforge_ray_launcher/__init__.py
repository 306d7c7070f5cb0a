"""The Ray jobs launcher for Hydra sweeps (``hydra/launcher=ray_jobs``, docs/ray.md). Hydra finds launchers only
in the ``hydra_plugins`` namespace, by the module that defines them: ``ray_jobs_launcher.RayJobsLauncher``."""
