"""rope_ref.py - an independent float64 reference for RoPE inverse frequencies and magnitudes.

What this is: the inverse-frequency table theta_i (i = 0 .. d/2-1) and the attention magnitude
m_s of every scaling mode our C program offers, written in numpy float64 straight from the
published formulas, so that tests can check rope.c against something that does not share its
code. tests/test_rope_tables.py and scripts/plot_rope.py check rope.c against it and
tests/reference.py takes its frequencies from it; it sits in lrun/ so scripts import nothing
from tests/.
What this is not: fast, or a copy of anyone's implementation (and it never imports rope.c).

Sources of the formulas (test vectors computed from them: docs/rope-test-vectors.md):
  none     RoFormer, Su et al. arXiv 2104.09864 eq. (15): theta_i = b^(-2i/d);
           HF transformers modeling_rope_utils.py `_compute_default_rope_parameters`.
  pi       Position Interpolation, Chen et al. arXiv 2306.15595: f'(x, m) = f(x, m/s), which is
           theta_i / s; HF `_compute_linear_scaling_rope_parameters` ("linear").
  ntk      NTK-aware base change, bloc97 (r/LocalLLaMA 14lz7j5), YaRN paper arXiv 2309.00071
           Definition 1 / Appendix A.1: b' = b * alpha^(d/(d-2)); not in HF mainline.
  dynamic  Dynamic NTK, emozilla (r/LocalLLaMA 14mrgpr); HF
           `_compute_dynamic_ntk_parameters`: l = max(seq_len, L),
           b' = b * (s*l/L - (s-1))^(d/(d-2)).
  yarn     YaRN, arXiv 2309.00071 sections 3.2-3.4 (eq. 21-22); HF
           `_compute_yarn_parameters` with its inner `find_correction_dim`,
           `find_correction_range` and `linear_ramp_factor`; attention factor 0.1 ln(s) + 1.
  llama3   Meta's Llama 3.1 `apply_scaling`; HF `_compute_llama3_parameters`.
  longrope LongRoPE, Ding et al. arXiv 2402.13753 (Phi-3's "su" scaling); HF
           `_compute_longrope_parameters` and the `longrope_frequency_update` branch of
           `dynamic_rope_update`: one rescale factor per pair, theta_i = b^(-2i/d) / f_i, where f is
           `long_factor` when the sequence (largest position + 1) is longer than L, else
           `short_factor`; attention factor sqrt(1 + ln(s) / ln(L)) for s > 1 (else 1), s =
           factor, or max_position_embeddings / L when the config gives none.

Conventions: d = the rotated dimension (head_dim, or int(head_dim * partial_rotary_factor) when only
part of each head turns: HF's `dim` in every `_compute_*_parameters`), b = base (rope_theta), L = the
trained context (YaRN / llama3 / longrope: original_max_position_embeddings), s = factor, i = pair
index.
"""
import math

import numpy as np

# rerope and leaky-rerope keep the trained frequencies (none's): they clip the relative position in
# attention instead (tests/reference.py, relative_scores); selfextend too: it groups the positions of
# far keys, and dca, which rotates by positions within chunks (tests/reference.py, forward).
# dynamic-yarn is yarn with s = max(1, l / L).
MODES = ("none", "pi", "ntk", "dynamic", "yarn", "llama3", "rerope", "leaky-rerope", "longrope", "selfextend",
         "dynamic-yarn", "dca")
ALIASES = {"default": "none", "linear": "pi"}


def canonical_mode(mode):
    """Our mode name for `mode` (accepts HF's "default" and "linear")."""
    mode = ALIASES.get(mode, mode)
    if mode not in MODES:
        raise ValueError(f"unknown RoPE mode {mode!r}; expected one of {MODES} (or default, linear)")
    return mode


def default_inv_freq(d, base):
    """theta_i = b^(-2i/d), i = 0 .. d/2-1 (RoFormer eq. 15; HF `_compute_default_rope_parameters`:
    1.0 / (base ** (arange(0, dim, 2) / dim)))."""
    if d <= 0 or d % 2:
        raise ValueError(f"head_dim must be even and positive, got {d}")
    two_i = np.arange(0, d, 2, dtype=np.float64)  # (d/2) 2i
    return 1.0 / (float(base) ** (two_i / d))  # (d/2)


def ntk_base(d, base, alpha):
    """b' = b * alpha^(d/(d-2)) (YaRN paper Definition 1, Appendix A.1): chosen so the last pair
    (exponent (d-2)/d) is divided by alpha exactly while pair 0 stays 1."""
    return float(base) * float(alpha) ** (d / (d - 2.0))


def dynamic_base(d, base, L, s, length=None):
    """HF `_compute_dynamic_ntk_parameters`: seq_len defaults to (and is floored at) L, then
    b' = b * ((s * l / L) - (s - 1))^(d/(d-2)). At l = L the bracket is 1: no change."""
    l = L if length is None or length <= L else length
    return float(base) * ((s * l / L) - (s - 1.0)) ** (d / (d - 2.0))


def yarn_correction_dim(num_rotations, d, base, L):
    """HF yarn `find_correction_dim`: the (real) pair index whose number of full turns over the
    trained context L is num_rotations: d * ln(L / (2 pi n)) / (2 ln b)."""
    return (d * math.log(L / (num_rotations * 2.0 * math.pi))) / (2.0 * math.log(base))


def yarn_correction_range(beta_fast, beta_slow, d, base, L):
    """HF yarn `find_correction_range`: lo = max(floor(corr(beta_fast)), 0),
    hi = min(ceil(corr(beta_slow)), d - 1). (The upper clamp uses d-1, not d/2-1, as HF does.)"""
    lo = math.floor(yarn_correction_dim(beta_fast, d, base, L))
    hi = math.ceil(yarn_correction_dim(beta_slow, d, base, L))
    return max(lo, 0), min(hi, d - 1)


def yarn_ramp(lo, hi, n):
    """HF yarn `linear_ramp_factor`: clamp((i - lo) / (hi - lo), 0, 1) for i = 0 .. n-1, with
    hi += 0.001 when lo == hi ("Prevent singularity"). 0 for fast pairs, 1 for slow ones."""
    lo = float(lo)
    hi = float(hi)
    if lo == hi:
        hi += 0.001
    return np.clip((np.arange(n, dtype=np.float64) - lo) / (hi - lo), 0.0, 1.0)  # (n)


def longrope_attention_factor(s, L):
    """HF `_compute_longrope_parameters`: sqrt(1 + ln(s) / ln(L)) when s > 1, else 1."""
    return 1.0 if s <= 1.0 else math.sqrt(1.0 + math.log(s) / math.log(L))


def inv_freq(mode, d, base, L, s, alpha=None, length=None, beta_fast=32, beta_slow=1,
             low_freq_factor=1, high_freq_factor=4, attn_factor=None, short_factor=None, long_factor=None):
    """Inverse frequencies (d/2 float64) and the magnitude m_s folded into cos and sin.

    mode: none|pi|ntk|dynamic|yarn|llama3|longrope (or HF's default|linear); d: the rotated
    dimension (head_dim, or its rotated part); base: b; L: trained context (yarn/llama3/longrope:
    original_max_position_embeddings); s: factor; alpha: ntk only, None or 0 means s; length:
    dynamic and longrope, current sequence length l (None means L; longrope takes long_factor only
    when l > L); beta_fast/beta_slow/attn_factor: yarn; attn_factor, short_factor, long_factor
    (d/2 numbers each): longrope; low/high_freq_factor: llama3.
    Zero or None for beta_fast, beta_slow, attn_factor means "the default", as in the C header.
    """
    mode = canonical_mode(mode)
    theta = default_inv_freq(d, base)  # (d/2)
    mscale = 1.0
    if mode == "dynamic-yarn":
        # The YaRN paper's sec. 3.3 "Dynamic Scaling" on YaRN: s = max(1, l' / L) for the current
        # length l' (None: L), then YaRN as below with that s.
        mode, s = "yarn", max(1.0, (length or L) / L)
    if mode in ("none", "rerope", "leaky-rerope", "selfextend", "dca"):
        pass
    elif mode == "pi":
        # PI: positions m -> m / s, i.e. theta_i -> theta_i / s (HF: inv_freq /= factor).
        theta = theta / s
    elif mode == "ntk":
        a = s if not alpha else alpha
        theta = default_inv_freq(d, ntk_base(d, base, a))
    elif mode == "dynamic":
        theta = default_inv_freq(d, dynamic_base(d, base, L, s, length))
    elif mode == "yarn":
        bf = beta_fast or 32.0
        bs = beta_slow or 1.0
        lo, hi = yarn_correction_range(bf, bs, d, base, L)
        g = 1.0 - yarn_ramp(lo, hi, d // 2)  # (d/2) "inv_freq_extrapolation_factor"
        # theta_i' = (1 - g_i) * theta_i / s + g_i * theta_i (HF: interpolation * (1 - g) +
        # extrapolation * g); written with HF's two separate tables.
        extrapolation = theta
        interpolation = 1.0 / (s * (float(base) ** (np.arange(0, d, 2, dtype=np.float64) / d)))
        theta = interpolation * (1.0 - g) + extrapolation * g
        # YaRN eq. 22: sqrt(1/t) = 0.1 ln(s) + 1, applied to both cos and sin.
        mscale = attn_factor if attn_factor else 0.1 * math.log(s) + 1.0
    elif mode == "llama3":
        lf = float(low_freq_factor)
        hf = float(high_freq_factor)
        wavelen = 2.0 * math.pi / theta  # (d/2) tokens per turn
        low_freq_wavelen = L / lf  # longer than this: divide by s
        high_freq_wavelen = L / hf  # shorter than this: keep
        divided = np.where(wavelen > low_freq_wavelen, theta / s, theta)
        smooth = (L / wavelen - lf) / (hf - lf)
        smoothed = (1.0 - smooth) * divided / s + smooth * divided
        medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
        theta = np.where(medium, smoothed, divided)
    elif mode == "longrope":
        # HF: ext_factors = long_factor if seq_len > original_max_position_embeddings else short_factor;
        # inv_freq = 1 / (ext_factors * base ** (arange(0, dim, 2) / dim)).
        ext = long_factor if length is not None and length > L else short_factor
        if ext is None or len(ext) != d // 2:
            raise ValueError(f"longrope needs short_factor and long_factor of d/2 = {d // 2} numbers each, "
                             f"got {None if ext is None else len(ext)}")
        shape = np.arange(0, d, 2, dtype=np.float64) / d  # (d/2) 2i/d
        theta = 1.0 / (np.asarray(ext, dtype=np.float64) * float(base) ** shape)
        mscale = attn_factor if attn_factor else longrope_attention_factor(s, L)
    return theta, float(mscale)


def effective_base(mode, d, base, L, s, alpha=None, length=None):
    """The base after any base change (ntk, dynamic); the plain base for the other modes."""
    mode = canonical_mode(mode)
    if mode == "ntk":
        return ntk_base(d, base, s if not alpha else alpha)
    if mode == "dynamic":
        return dynamic_base(d, base, L, s, length)
    return float(base)


def llama3_bands(d, base, L, low_freq_factor=1, high_freq_factor=4):
    """Per pair: 'H' kept (wavelength < L/hf), 'L' divided by s (> L/lf), 'M' blended."""
    wavelen = 2.0 * math.pi / default_inv_freq(d, base)
    return ["H" if w < L / high_freq_factor else "L" if w > L / low_freq_factor else "M"
            for w in wavelen]


def angles(inv, m):
    """m * theta_i in float64, (d/2)."""
    return float(m) * np.asarray(inv, dtype=np.float64)


def cos_sin(inv, mscale, m):
    """mscale * cos(m theta_i), mscale * sin(m theta_i): what the C tables hold (as float32)."""
    a = angles(inv, m)
    return mscale * np.cos(a), mscale * np.sin(a)


def rotate_interleaved(x, inv, mscale, m):
    """Rotate x (d) at position m with pairs (x[2i], x[2i+1]) (RoFormer / Meta / llama2.c)."""
    x = np.asarray(x, dtype=np.float64)
    c, s_ = cos_sin(inv, mscale, m)
    out = np.empty_like(x)
    out[0::2] = x[0::2] * c - x[1::2] * s_
    out[1::2] = x[0::2] * s_ + x[1::2] * c
    return out


def rotate_half_layout(x, inv, mscale, m):
    """Rotate x (d) at position m with HF's layout: x * cos + rotate_half(x) * sin, where
    emb = cat(freqs, freqs) and rotate_half(x) = cat(-x2, x1); pair i is (x[i], x[i + d/2])."""
    x = np.asarray(x, dtype=np.float64)
    c, s_ = cos_sin(inv, mscale, m)
    c = np.concatenate([c, c])
    s_ = np.concatenate([s_, s_])
    h = x.shape[-1] // 2
    rot = np.concatenate([-x[h:], x[:h]])
    return x * c + rot * s_
