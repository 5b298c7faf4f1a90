"""Where a grid's trials run: ``[executor]`` in ``experiment.toml``, or ``rise eval --executor``.

``local`` (the default) runs trials on this machine with the job's bounded concurrency. ``ray`` sends each
trial to a Ray cluster as one task that asks for ``resources`` (plus ``docker_resources`` for docker
trials), so a node offers as many slots as it declares (``ray start --resources '{"rise_trial": 4}'``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class ExecutorConfig(BaseModel):
    """How and where the trials of a grid run. Never part of a job's identity: a grid started on one
    executor resumes on another."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["local", "ray"] = "local"
    address: str | None = Field(default=None, description="Ray cluster address (ray): host:port or 'auto'")
    resources: dict[str, float] = Field(default_factory=lambda: {"rise_trial": 1.0},
                                        description="custom Ray resources one trial asks for")
    docker_resources: dict[str, float] = Field(default_factory=lambda: {"rise_docker": 1.0},
                                               description="added to resources for --env docker trials")
    trial_timeout_sec: float | None = Field(default=None, gt=0, description="wall-clock limit of one trial on a "
                                            "worker; default: the task's agent + verifier timeouts + 600 s")
    delivery: Literal["object_store", "shared"] = Field(
        default="object_store", description="object_store: the trial folder comes back as a tar through Ray; "
        "shared: workers write under the job folder itself (a filesystem every node mounts at the same path)")
    ship: bool = Field(default=True, description="send task folders and harness directories to the workers "
                       "(cached per content hash) instead of expecting them at the same path on every node")
    node_lost_reruns: int = Field(default=1, ge=0, description="reruns of a trial whose node or model replica "
                                  "was lost (each lost attempt is kept as <trial>.attempt-N)")
    replicas: list[str] = Field(default_factory=list, description="more base URLs serving the same model as "
                                 "[endpoint]: together they form a pool (least outstanding trials first)")

    @field_validator("resources", "docker_resources")
    @classmethod
    def _positive(cls, value: dict[str, float]) -> dict[str, float]:
        bad = [k for k, v in value.items() if v <= 0]
        if bad:
            raise ValueError(f"resource amounts must be > 0: {', '.join(bad)}")
        return value

    def trial_resources(self, env_kind: str) -> dict[str, float]:
        """The custom resources one trial of ``env_kind`` asks the Ray scheduler for."""
        return {**self.resources, **(self.docker_resources if env_kind == "docker" else {})}
