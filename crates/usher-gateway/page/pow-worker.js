// usher proof-of-work solver, run as a Web Worker by page.js (docs/security.md, "Proof of work").
// In: {puzzle, difficulty}. Finds the first nonce (0, 1, 2, …) such that
// SHA-256(puzzle + "." + nonce) starts with `difficulty` zero bits.
// Out: {hashes} about every 100 ms (progress), then {nonce, hashes}.
//
// SHA-256 is written out here rather than taken from crypto.subtle: subtle is asynchronous
// (a promise per hash) and cannot reuse the state of the puzzle's whole 64-byte blocks, which
// every attempt shares; this computes them once and then one or two blocks per attempt.
"use strict";
const K = new Uint32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);
const IV = [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];
const W = new Uint32Array(64);

// One compression of the 64 bytes of `b` at `off` into the state `H`.
function compress(H, b, off) {
  for (let i = 0; i < 16; i++) {
    const j = off + 4 * i;
    W[i] = (b[j] << 24) | (b[j + 1] << 16) | (b[j + 2] << 8) | b[j + 3];
  }
  for (let i = 16; i < 64; i++) {
    const x = W[i - 15], y = W[i - 2];
    const s0 = ((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3);
    const s1 = ((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10);
    W[i] = (W[i - 16] + s0 + W[i - 7] + s1) | 0;
  }
  let a = H[0], b0 = H[1], c = H[2], d = H[3], e = H[4], f = H[5], g = H[6], h = H[7];
  for (let i = 0; i < 64; i++) {
    const S1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
    const t1 = (h + S1 + ((e & f) ^ (~e & g)) + K[i] + W[i]) | 0;
    const S0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
    const t2 = (S0 + ((a & b0) ^ (a & c) ^ (b0 & c))) | 0;
    h = g; g = f; f = e; e = (d + t1) | 0; d = c; c = b0; b0 = a; a = (t1 + t2) | 0;
  }
  H[0] += a; H[1] += b0; H[2] += c; H[3] += d; H[4] += e; H[5] += f; H[6] += g; H[7] += h;
}

// Leading zero bits of the digest in `H`.
function zeroBits(H) {
  let n = 0;
  for (let i = 0; i < 8; i++) {
    const z = Math.clz32(H[i]);
    n += z;
    if (z < 32) break;
  }
  return n;
}

onmessage = ({ data: { puzzle, difficulty } }) => {
  const prefix = new TextEncoder().encode(puzzle + ".");
  const whole = prefix.length - (prefix.length % 64);
  const mid = new Uint32Array(IV);
  for (let off = 0; off < whole; off += 64) compress(mid, prefix, off);
  const tail = new Uint8Array(128); // the rest of the prefix, the nonce, the padding
  tail.set(prefix.subarray(whole));
  const rest = prefix.length - whole;
  const H = new Uint32Array(8);
  let last = Date.now();
  for (let nonce = 0; ; nonce++) {
    const digits = String(nonce);
    let len = rest;
    for (let i = 0; i < digits.length; i++) tail[len++] = digits.charCodeAt(i);
    const end = len + 9 <= 64 ? 64 : 128;
    tail.fill(0, len, end);
    tail[len] = 0x80;
    const bits = (prefix.length + digits.length) * 8;
    tail[end - 4] = bits >>> 24; tail[end - 3] = bits >>> 16; tail[end - 2] = bits >>> 8; tail[end - 1] = bits;
    H.set(mid);
    compress(H, tail, 0);
    if (end === 128) compress(H, tail, 64);
    if (zeroBits(H) >= difficulty) return postMessage({ nonce: digits, hashes: nonce + 1 });
    if ((nonce & 0x3fff) === 0x3fff) {
      const now = Date.now();
      if (now - last >= 100 || nonce === 0x3fff) { last = now; postMessage({ hashes: nonce + 1 }); }
    }
  }
};
