"""Rounds the number of actors up, so the largest pool does not fit in the CPUs left."""
ANSWERS = {
    "pool_for_answer": '''
import math

def pool_for(cluster_cpus: float, cpus_per_actor: float = 1.0, reserved_cpus: float = 1.0):
    if cpus_per_actor <= 0:
        raise ValueError(f"cpus_per_actor must be positive, got {cpus_per_actor}.")
    max_actors = math.ceil((cluster_cpus - reserved_cpus) / cpus_per_actor)
    if max_actors < 1:
        raise ValueError("no actor fits")
    return ray.data.ActorPoolStrategy(min_size=1, max_size=max_actors)
''',
}
FAILS = {"pool_for_hidden"}
