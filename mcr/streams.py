"""The caller's CUDA stream, cheaply: stream ids, ordering a buffer's calls across streams,
and a work handle for ops enqueued on a stream with no library work object."""

from __future__ import annotations

from typing import Any

import torch

# torch.cuda.current_stream() costs several microseconds of Python per call on the GPU hosts
# here (H200 hosts, 2026-11-22); these are the C calls underneath it. Public fallbacks where
# torch lacks them.
_get_device = getattr(torch._C, "_cuda_getDevice", None)
_get_stream = getattr(torch._C, "_cuda_getCurrentStream", None)
# Is the current stream capturing a CUDA graph? (torch's C call: the Python wrapper costs more)
capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None) or \
    torch.cuda.is_current_stream_capturing


_get_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)

StreamId = tuple[int, int, int]   # (stream id, device index, device type), as torch names them


def raw_stream(device: int) -> int:
    """The current CUDA stream of `device` as its C handle (what driver calls take)."""
    if _get_raw_stream is None:
        return torch.cuda.current_stream(device).cuda_stream
    return _get_raw_stream(device)


def current_stream_id(device: int | None = None) -> StreamId:
    """The current CUDA stream of `device` (default: the current device) as a StreamId."""
    if _get_device is None or _get_stream is None:
        s = torch.cuda.current_stream(device)
        return s.stream_id, s.device_index, s.device_type
    return tuple(_get_stream(_get_device() if device is None else device))


def stream_of(sid: StreamId) -> torch.cuda.Stream:
    """The torch Stream a StreamId names."""
    return torch.cuda.Stream(stream_id=sid[0], device_index=sid[1], device_type=sid[2])


def follow_stream(last: StreamId | None, device: int) -> StreamId:
    """The caller's current stream on `device`, made to wait first for `last` (the stream of
    the previous call on a buffer both calls use) where they differ, outside graph capture: two
    calls on two streams then use the buffer one after the other."""
    sid = current_stream_id(device)
    if last is not None and last != sid and not capturing():
        stream_of(sid).wait_stream(stream_of(last))
    return sid


class StreamDone:
    """torch-work-like handle of ops enqueued on a CUDA stream with no library work object.

    Holds the stream's id, not a Stream object (cheap to take per call). The completion event is
    recorded lazily, at the first wait or query: it then also covers later work on that stream,
    which is conservative and costs nothing on the common path (a wait on the same stream).
    """

    __slots__ = ("sid", "event")

    def __init__(self, sid: StreamId | None = None) -> None:
        self.sid = current_stream_id() if sid is None else sid
        self.event: torch.cuda.Event | None = None

    @property
    def stream(self) -> torch.cuda.Stream:
        """The stream the ops were enqueued on."""
        return stream_of(self.sid)

    def _ev(self) -> torch.cuda.Event:
        if self.event is None:
            self.event = torch.cuda.Event()
            self.event.record(self.stream)
        return self.event

    def wait(self, timeout: Any = None) -> bool:
        """The caller's current stream waits for the op (no host block)."""
        cur = current_stream_id(self.sid[1])
        if cur != self.sid:
            stream_of(cur).wait_event(self._ev())
        return True

    def is_completed(self) -> bool:
        """Has the device finished the op?"""
        return self._ev().query()

    def get_future(self) -> Any:
        """Stream-ordered copy-engine ops have no torch future."""
        raise NotImplementedError("this backend's work has no torch future; use wait()")
