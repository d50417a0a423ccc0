"""Before grading on a Ray cluster: will it take this process's token? One question, one line.

``ray start --head`` in Ray 2.60 turns token authentication on when a token is at hand (it
generates one with ``ray get-auth-token --generate``; ``~/.ray/auth_token``). A driver given an
explicit address (``--cluster``, ``RAY_ADDRESS``) sends the token only when its own environment
says ``RAY_AUTH_MODE=token``; without it, ``ray.init`` retries for about 20 s, prints a warning
per second (``InvalidAuthToken``) and ends in a traceback. :func:`check_cluster_auth` asks the
cluster's GCS once, with a short timeout and the same authentication headers ``ray.init``
would send, and raises :class:`ClusterAuthError`, one line saying what to set, when it refuses
them. It says nothing about a cluster it cannot reach: ``ray.init`` reports that in its own
words.

This uses Ray's generated gRPC stubs and its client interceptor (``ray.core.generated``,
``ray._private.authentication``) of the pinned Ray 2.60.0.
"""

from __future__ import annotations

import os

from raydata_grader.dispatch import ClusterError

__all__ = ["ClusterAuthError", "check_cluster_auth", "PROBE_TIMEOUT_S"]

#: How long the one question to the cluster may take, in seconds.
PROBE_TIMEOUT_S = 10.0


class ClusterAuthError(ClusterError):
    """The cluster refused this process's authentication (the message says what to set)."""


def _gcs_address(address: str) -> str | None:
    """``host:port`` of the cluster's GCS, or None when ``address`` is not one (``auto``, ``ray://``)."""
    address = address.strip()
    if not address or address == "auto" or "://" in address or ":" not in address:
        return None
    return address


def check_cluster_auth(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Raise :class:`ClusterAuthError` if the Ray cluster at ``address`` refuses this process's token.

    Asks the cluster's GCS for its cluster id (what ``ray.init`` asks first), sending what
    ``ray.init`` would send: the token (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` or
    ``~/.ray/auth_token``) when ``RAY_AUTH_MODE=token``, none otherwise.

    Args:
        address: the cluster's address, ``host:port`` (``auto`` and ``ray://`` are not checked).
        timeout_s: how long to wait for the answer, in seconds.

    Raises:
        ClusterAuthError: if the cluster answered that the token is missing or wrong.
    """
    target = _gcs_address(address)
    if target is None:
        return
    import grpc
    from ray._private.authentication.grpc_authentication_client_interceptor import (
        SyncAuthenticationMetadataClientInterceptor,
    )
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc
    from ray.exceptions import AuthenticationError

    channel = grpc.intercept_channel(grpc.insecure_channel(target), SyncAuthenticationMetadataClientInterceptor())
    try:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), timeout=timeout_s)
    except grpc.RpcError as exc:
        if exc.code() != grpc.StatusCode.UNAUTHENTICATED:
            return  # unreachable, slow, or another error: ray.init says so in its own words
        raise ClusterAuthError(_advice(address)) from None
    except AuthenticationError:  # RAY_AUTH_MODE=token and no token to send: Ray's loader says so before asking
        raise ClusterAuthError(f"RAY_AUTH_MODE=token is set here, but there is no token to send to the Ray cluster at "
                               f"{address}: {_WHERE}") from None
    except ValueError:  # an address grpc cannot parse: left to ray.init
        return
    finally:
        channel.close()


_WHERE = ("put the cluster's own token (on the head node, `ray get-auth-token` prints it) in RAY_AUTH_TOKEN, in "
          "the file RAY_AUTH_TOKEN_PATH names, or in ~/.ray/auth_token")


def _advice(address: str) -> str:
    """What to set when the cluster at ``address`` answered that the token is missing or wrong."""
    mode = os.environ.get("RAY_AUTH_MODE")
    if (mode or "").lower() != "token":
        return (f"the Ray cluster at {address} uses token authentication, and this process does not send a token "
                f"(RAY_AUTH_MODE is {mode!r} here): set RAY_AUTH_MODE=token where you run the grader, and "
                + _WHERE)
    where = ("RAY_AUTH_TOKEN" if os.environ.get("RAY_AUTH_TOKEN") else
             f"RAY_AUTH_TOKEN_PATH ({os.environ['RAY_AUTH_TOKEN_PATH']})" if os.environ.get("RAY_AUTH_TOKEN_PATH")
             else "~/.ray/auth_token")
    return (f"the Ray cluster at {address} uses token authentication and refused the token this process sends "
            f"(from {where}): {_WHERE}")
