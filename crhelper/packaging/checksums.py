"""The checksums a code package is known by: SHA-256, and the CRC-64 Function Compute and OSS compute.

FC 3.0's `codeChecksum` (and `Code.Checksum` of `ALIYUN::FC3::Function`) is OSS's
`x-oss-hash-crc64ecma`: CRC-64 with the ECMA-182 polynomial, reflected, initial value and final
XOR all ones (the variant catalogued as CRC-64/XZ; check value of b"123456789" is
0x995DC9BBDF1939FA), written as an unsigned decimal string. Pure Python, slice-by-8, so that
deploy can compare it with `codeChecksum` without a compiled dependency.
"""

from __future__ import annotations

import hashlib
import sys
from typing import BinaryIO

#: ECMA-182's polynomial 0x42F0E1EBA9EA3693, bit-reversed (the reflected form).
_POLY = 0xC96C5795D7870F42
_MASK = 0xFFFFFFFFFFFFFFFF


def _tables() -> tuple[list[int], ...]:
    first = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ _POLY if crc & 1 else crc >> 1
        first.append(crc)
    tables = [first]
    for _ in range(7):
        previous = tables[-1]
        tables.append([(previous[i] >> 8) ^ first[previous[i] & 0xFF] for i in range(256)])
    return tuple(tables)


_T = _tables()
_LITTLE = sys.byteorder == "little"


def crc64_update(crc: int, data: bytes) -> int:
    """The CRC-64/XZ of what `crc` covered followed by `data` (start from 0)."""
    t0, t1, t2, t3, t4, t5, t6, t7 = _T
    value = crc ^ _MASK
    whole = len(data) - len(data) % 8
    head = memoryview(data)[:whole]
    # Native 64-bit words are little-endian here (x86_64, arm64): one Python step per 8 bytes.
    words = head.cast("Q") if _LITTLE else (int.from_bytes(head[i:i + 8], "little") for i in range(0, whole, 8))
    for word in words:
        value ^= word
        value = (t7[value & 0xFF] ^ t6[(value >> 8) & 0xFF] ^ t5[(value >> 16) & 0xFF] ^ t4[(value >> 24) & 0xFF]
                 ^ t3[(value >> 32) & 0xFF] ^ t2[(value >> 40) & 0xFF] ^ t1[(value >> 48) & 0xFF] ^ t0[value >> 56])
    for byte in data[whole:]:
        value = t0[(value ^ byte) & 0xFF] ^ (value >> 8)
    return value ^ _MASK


def crc64(data: bytes) -> int:
    """CRC-64/XZ (ECMA-182 reflected) of `data`, as FC's `codeChecksum` and OSS's crc64ecma compute it."""
    return crc64_update(0, data)


def digests(stream: BinaryIO, chunk: int = 1 << 20) -> tuple[str, int]:
    """(SHA-256 hex, CRC-64 as an int) of what `stream` holds, read once."""
    sha = hashlib.sha256()
    crc = 0
    while True:
        block = stream.read(chunk)
        if not block:
            return sha.hexdigest(), crc
        sha.update(block)
        crc = crc64_update(crc, block)
