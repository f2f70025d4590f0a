# Minimal stand-in (the containers engineer extends it): where each role's rules run.
# `container_for(role)` is None when `containers.mode` is `none` (rules run on the host).


def container_for(role):
    if CFG.containers.mode == "none":
        return None
    return f"docker://{CFG.containers.registry}/fp8rl-{role}:{CFG.containers.tag}"
