"""Copies a big-node recipe, ActorPoolStrategy(min_size=2, max_size=8), whatever the cluster."""
ANSWERS = {
    "pool_for_answer": '''
def pool_for(cluster_cpus: float, cpus_per_actor: float = 1.0, reserved_cpus: float = 1.0):
    return ray.data.ActorPoolStrategy(min_size=2, max_size=8)
''',
}
FAILS = {"pool_for_visible", "pool_for_hidden"}
