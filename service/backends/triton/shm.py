"""System shared memory for a co-located Triton (``COMPCAP_TRITON_SHARED_MEMORY=true``).

Each in-flight call leases one registered region from a pool, writes its inputs into it and has Triton
write the outputs behind them, so tensors cross neither the gRPC payload nor its serialisation. Regions
are sized to powers of two, reused across calls, registered once, and unregistered and unlinked by
``close()``; ``reset()`` (the server came back, maybe restarted) registers new ones from then on. The
server must see the gateway's ``/dev/shm`` (same host, or a shared volume in a pod): one Triton address
only, never a list or a DNS name of several (the settings refuse it).
"""

from __future__ import annotations

import os
import secrets

import numpy as np
import tritonclient.grpc.aio as grpcclient
import tritonclient.utils.shared_memory as shm

ALIGN = 64
MIN_REGION_BYTES = 1 << 16
MAX_FREE_REGIONS = 8


def aligned(nbytes: int) -> int:
    return (nbytes + ALIGN - 1) // ALIGN * ALIGN


class Region:
    """One POSIX shared-memory object, known to Triton as ``name``."""

    def __init__(self, name: str, size: int, generation: int = 0) -> None:
        self.name = name
        self.generation = generation  # the pool's generation it was registered in
        self.key = f"/{name}"
        self.size = size
        self.handle = shm.create_shared_memory_region(name, self.key, size, create_only=True)

    def write(self, array: np.ndarray, offset: int) -> None:
        shm.set_shared_memory_region(self.handle, [np.ascontiguousarray(array)], offset)

    def read(self, dtype: np.dtype, shape: list[int], offset: int) -> np.ndarray:
        """A private copy (the region is reused by the next call)."""
        view = shm.get_contents_as_numpy(self.handle, dtype, shape, offset)
        copy = np.array(view)
        del view  # release the mapping's exported buffer before the region can be closed
        return copy

    def destroy(self) -> None:
        shm.destroy_shared_memory_region(self.handle)


class RegionPool:
    """Registered regions of one backend, leased one per in-flight call."""

    def __init__(self, client: grpcclient.InferenceServerClient, timeout_s: float | None = None) -> None:
        self.client = client
        self.timeout_s = timeout_s
        self.prefix = f"compcap_{os.getpid()}_{secrets.token_hex(4)}_"
        self._free: list[Region] = []
        self._all: dict[str, Region] = {}
        self._count = 0
        self._stale: list[str] = []
        self._generation = 0

    async def lease(self, nbytes: int) -> Region:
        fits = [r for r in self._free if r.size >= nbytes]
        if fits:
            region = min(fits, key=lambda r: r.size)
            self._free.remove(region)
            return region
        self._count += 1
        size = max(MIN_REGION_BYTES, 1 << max(nbytes - 1, 0).bit_length())
        region = Region(f"{self.prefix}{self._count}", size, self._generation)
        try:
            await self.client.register_system_shared_memory(
                region.name, region.key, region.size, client_timeout=self.timeout_s
            )
        except BaseException:  # e.g. cancelled: the server may have registered it all the same
            self._stale.append(region.name)
            region.destroy()
            raise
        self._all[region.name] = region
        return region

    async def release(self, region: Region) -> None:
        if region.generation != self._generation:  # registered before a reset(): not reused
            await self.discard(region)
            return
        self._free.append(region)
        while len(self._free) > MAX_FREE_REGIONS:
            smallest = min(self._free, key=lambda r: r.size)
            self._free.remove(smallest)
            await self._drop(smallest)

    async def reset(self) -> None:
        """Forget every region registered so far (the server may have restarted without them): free
        ones are unregistered (best effort) and unlinked now, leased ones when their call releases them."""
        self._generation += 1
        free, self._free = self._free, []
        for region in free:
            await self.discard(region)

    async def discard(self, region: Region) -> None:
        """Unregister and unlink a region that must not be reused (the server keeps its own mapping)."""
        try:
            await self._drop(region)
        except Exception:  # unregistered again by close() at the latest; the local object is unlinked
            self._stale.append(region.name)

    async def _drop(self, region: Region) -> None:
        self._all.pop(region.name, None)
        try:
            await self.client.unregister_system_shared_memory(region.name, client_timeout=self.timeout_s)
        finally:
            region.destroy()

    @property
    def names(self) -> list[str]:
        return sorted(self._all)

    async def close(self) -> None:
        """Unregister and unlink every region (best effort on the server side: it may be gone)."""
        regions, self._free = list(self._all.values()), []
        for region in regions:
            try:
                await self._drop(region)
            except Exception:  # the server is unreachable: the local objects are unlinked regardless
                continue
        stale, self._stale = self._stale, []
        for name in stale:
            try:
                await self.client.unregister_system_shared_memory(name, client_timeout=self.timeout_s)
            except Exception:
                continue
