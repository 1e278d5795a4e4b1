// test_rope.c - unit tests of rope.c: the properties that make RoPE a relative position code.
//
// What this checks (numbers from docs/rope-test-vectors.md section 3):
//   * layout: interleaved pairs, d = 8, x = [1..8] at positions 1 and 3 (the printed vectors);
//   * tables: every cos/sin entry is the float32 of mscale * cos(m * theta_i) with the angle formed
//     in double (an fp32 angle is off by ~1e-3 rad at m = 1e5);
//   * composition: rotating by a then by b equals rotating by a + b (the fixed-frequency modes);
//   * relative position: <R(m) q, R(n) k> depends only on m - n, up to n = 100000, and equals the
//     printed double-precision values (22.550544960148 for none, ...);
//   * norms: |R(m) q| = m_s |q| (m_s = 1 except yarn, 0.1 ln s + 1);
//   * dynamic NTK: tables follow rope_set_length, `version` moves exactly when the base changes,
//     and mixing bases breaks the relative-position property (the KV-cache caveat);
//   * names, parameter checks and rope_params_resolve's documented defaults.
// Prints one line per check with its max difference, then a verdict; exits 1 on any failure.
// Build and run: make tests/test_rope && ./tests/test_rope   (also part of `make test`).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rope.h"

static int n_checks, n_failed;

// One line per check: "ok" or "FAIL", what, the measured max difference and the tolerance.
static void check(const char *what, double diff, double tol) {
    int ok = diff <= tol; // NaN fails
    n_checks++;
    if (!ok) n_failed++;
    printf("%-4s %-66s max diff %.3e (tol %.1e)\n", ok ? "ok" : "FAIL", what, diff, tol);
}

static void check_true(const char *what, int cond) {
    n_checks++;
    if (!cond) n_failed++;
    printf("%-4s %s\n", cond ? "ok" : "FAIL", what);
}

static RopeParams params(RopeScaling mode, int d, double base, int L, double s) {
    RopeParams p;
    memset(&p, 0, sizeof(p));
    p.mode = mode;
    p.head_dim = d;
    p.base = base;
    p.orig_ctx = L;
    p.factor = s;
    return p;
}

static void init_or_die(Rope *r, const RopeParams *p, int max_pos) {
    char err[256];
    if (rope_init(r, p, max_pos, err, sizeof(err))) {
        fprintf(stderr, "error: rope_init(%s): %s\n", rope_scaling_name(p->mode), err);
        exit(1);
    }
}

// docs/rope-test-vectors.md section 3's vectors: q_j = cos(j), k_j = sin(j+1).
static void fill_qk(float *q, float *k, double *qd, double *kd, int d) {
    for (int j = 0; j < d; j++) {
        qd[j] = cos(j);
        kd[j] = sin(j + 1);
        q[j] = (float)qd[j];
        k[j] = (float)kd[j];
    }
}

// Rotation in double from the inverse frequencies, independent of the float tables.
static void rotate_double(double *x, const double *inv_freq, double mscale, int d, double pos) {
    for (int i = 0; i < d / 2; i++) {
        double c = mscale * cos(pos * inv_freq[i]), s = mscale * sin(pos * inv_freq[i]);
        double x0 = x[2 * i], x1 = x[2 * i + 1];
        x[2 * i] = x0 * c - x1 * s;
        x[2 * i + 1] = x0 * s + x1 * c;
    }
}

static double dot_f(const float *a, const float *b, int n) {
    double s = 0;
    for (int i = 0; i < n; i++)
        s += (double)a[i] * b[i];
    return s;
}

static double dot_d(const double *a, const double *b, int n) {
    double s = 0;
    for (int i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

// ---------------------------------------------------------------------------------------------

static void test_names(void) {
    int ok = 1;
    for (int m = 0; m < ROPE_SCALING_COUNT; m++) {
        RopeScaling back;
        ok &= rope_scaling_from_name(rope_scaling_name((RopeScaling)m), &back) == 0 && (int)back == m;
    }
    RopeScaling pi;
    ok &= rope_scaling_from_name("linear", &pi) == 0 && pi == ROPE_SCALING_PI;
    ok &= !strcmp(rope_scaling_name(ROPE_SCALING_NONE), "none") && !strcmp(rope_scaling_name(ROPE_SCALING_PI), "pi") &&
          !strcmp(rope_scaling_name(ROPE_SCALING_NTK), "ntk") &&
          !strcmp(rope_scaling_name(ROPE_SCALING_DYNAMIC), "dynamic") &&
          !strcmp(rope_scaling_name(ROPE_SCALING_YARN), "yarn") &&
          !strcmp(rope_scaling_name(ROPE_SCALING_LLAMA3), "llama3");
    RopeScaling dummy;
    ok &= rope_scaling_from_name("bogus", &dummy) == -1;
    check_true("names: none pi ntk dynamic yarn llama3 round-trip, linear = pi, bogus refused", ok);
}

static void test_params_check(void) {
    char err[256];
    // The check reads a zero as its default and writes nothing; rope_params_defaults fills them.
    RopeParams p = params(ROPE_SCALING_YARN, 64, 1e4, 2048, 4);
    int ok = rope_params_check(&p, err, sizeof(err)) == 0 && p.beta_fast == 0 && p.beta_slow == 0 && p.rot_dims == 0;
    rope_params_defaults(&p, 2048);
    ok &= p.beta_fast == 32 && p.beta_slow == 1 && p.rot_dims == 64 && p.factor == 4;
    p = params(ROPE_SCALING_LLAMA3, 128, 5e5, 8192, 8);
    ok &= rope_params_check(&p, err, sizeof(err)) == 0 && p.low_freq_factor == 0;
    rope_params_defaults(&p, 8192);
    ok &= p.low_freq_factor == 1 && p.high_freq_factor == 4;
    // the knobs' sizes from L, the factor from the context: W = L / 4, dca's S = 3 L / 4 and w = L / 16,
    // pi's s = ctx / L (1 at ctx = L), leaky-rerope's K = (ctx - W) / (L - W), selfextend's smallest G
    RopeParams rr = params(ROPE_SCALING_REROPE, 8, 1e4, 512, 0), dca = params(ROPE_SCALING_DCA, 8, 1e4, 512, 0),
               pi = params(ROPE_SCALING_PI, 8, 1e4, 512, 0), pi_l = pi, leaky = params(ROPE_SCALING_LEAKY_REROPE, 8, 1e4, 512, 0),
               se = params(ROPE_SCALING_SELFEXTEND, 8, 1e4, 512, 0);
    rope_params_defaults(&rr, 4096), rope_params_defaults(&dca, 4096), rope_params_defaults(&pi, 2048);
    rope_params_defaults(&pi_l, 512), rope_params_defaults(&leaky, 2048), rope_params_defaults(&se, 2048);
    ok &= rr.window == 128 && rr.factor == 1 && rr.chunk == 0 && rr.group == 0 && rr.local_window == 0;
    ok &= dca.chunk == 384 && dca.local_window == 32 && dca.window == 0 && dca.factor == 1;
    ok &= pi.factor == 4 && pi_l.factor == 1 && leaky.window == 128 && leaky.factor == 5;
    ok &= se.window == 128 && se.factor == 1 && se.group == 6; // G 5: 2047 / 5 + 128 - 25 = 512 > L - 1; 6: 448
    check_true("rope_params_check writes nothing; rope_params_defaults fills beta 32/1, lf/hf 1/4, W, S, w, s, K, G",
               ok);

    struct {
        const char *what;
        RopeParams p;
    } bad[] = {
        {"odd head_dim", params(ROPE_SCALING_NONE, 63, 1e4, 2048, 1)},
        {"factor < 1", params(ROPE_SCALING_PI, 64, 1e4, 2048, 0.5)},
        {"base <= 0", params(ROPE_SCALING_NONE, 64, -1, 2048, 1)},
        {"trained context 0", params(ROPE_SCALING_PI, 64, 1e4, 0, 4)},
        {"NaN factor", params(ROPE_SCALING_PI, 64, 1e4, 2048, NAN)},
        {"unknown mode", params((RopeScaling)ROPE_SCALING_COUNT, 64, 1e4, 2048, 1)},
    };
    ok = 1;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = 0;
        int rc = rope_params_check(&bad[i].p, err, sizeof(err));
        if (rc != -1 || !err[0]) {
            printf("     rope_params_check accepted %s\n", bad[i].what);
            ok = 0;
        }
    }
    RopeParams y = params(ROPE_SCALING_YARN, 64, 1e4, 2048, 4);
    y.beta_fast = 1;
    y.beta_slow = 32;
    ok &= rope_params_check(&y, err, sizeof(err)) == -1;
    check_true("rope_params_check refuses odd d, s < 1, base <= 0, L = 0, NaN, bad mode, beta_fast < beta_slow", ok);
}

static void test_resolve(void) {
    char err[256];
    RopeParams trained = params(ROPE_SCALING_NONE, 8, 1e4, 512, 1), out;
    RopeOverrides o = {.mode = ROPE_SCALING_PI, .factor = 0, .base = 0, .alpha = 0};
    int ok = rope_params_resolve(&out, &trained, 2048, &o, err, sizeof(err)) == 0 && out.mode == ROPE_SCALING_PI &&
             out.factor == 4 && out.base == 1e4 && out.orig_ctx == 512;
    ok &= rope_params_resolve(&out, &trained, 256, &o, err, sizeof(err)) == 0 && out.factor == 1;
    o.factor = 3;
    o.base = 5e5;
    ok &= rope_params_resolve(&out, &trained, 2048, &o, err, sizeof(err)) == 0 && out.factor == 3 && out.base == 5e5;
    RopeOverrides keep = {.mode = -1};
    ok &= rope_params_resolve(&out, &trained, 2048, &keep, err, sizeof(err)) == 0 && out.mode == ROPE_SCALING_NONE;
    RopeOverrides ntk = {.mode = ROPE_SCALING_NTK, .alpha = 6};
    ok &= rope_params_resolve(&out, &trained, 1024, &ntk, err, sizeof(err)) == 0 && out.alpha == 6 && out.factor == 2;
    RopeOverrides none_factor = {.mode = ROPE_SCALING_NONE, .factor = 2};
    ok &= rope_params_resolve(&out, &trained, 1024, &none_factor, err, sizeof(err)) == ROPE_FACTOR_NOT_TAKEN &&
          strstr(err, "--rope-scaling pi|ntk|dynamic|yarn|llama3|leaky-rerope)");
    ok &= rope_params_resolve(&out, &trained, 4096, &keep, err, sizeof(err)) == 0 && out.factor == 1; // none: 1
    RopeOverrides alpha_pi = {.mode = ROPE_SCALING_PI, .alpha = 6};
    ok &= rope_params_resolve(&out, &trained, 1024, &alpha_pi, err, sizeof(err)) == ROPE_KNOB_NOT_TAKEN &&
          !strcmp(err, "--rope-alpha is used only by --rope-scaling ntk");
    // One code per kind of rule, each message naming the flag (run.c prints it).
    RopeOverrides rerope_factor = {.mode = ROPE_SCALING_REROPE, .factor = 2},
                  leaky_one = {.mode = ROPE_SCALING_LEAKY_REROPE, .factor = 1},
                  window_ntk = {.mode = ROPE_SCALING_NTK, .window = 64}, wide = {.mode = ROPE_SCALING_REROPE, .window = 513};
    ok &= rope_params_resolve(&out, &trained, 2048, &rerope_factor, err, sizeof(err)) == ROPE_FACTOR_NOT_TAKEN &&
          strstr(err, "rerope has no --rope-factor: ");
    ok &= rope_params_resolve(&out, &trained, 2048, &leaky_one, err, sizeof(err)) == ROPE_FACTOR_PLAIN;
    ok &= rope_params_resolve(&out, &trained, 2048, &window_ntk, err, sizeof(err)) == ROPE_KNOB_NOT_TAKEN &&
          !strcmp(err, "--rope-window is used only by --rope-scaling rerope, leaky-rerope, selfextend and dca");
    RopeOverrides group_pi = {.mode = ROPE_SCALING_PI, .group = 4}, chunk_se = {.mode = ROPE_SCALING_SELFEXTEND, .chunk = 40},
                  se_factor = {.mode = ROPE_SCALING_SELFEXTEND, .factor = 4},
                  dy_factor = {.mode = ROPE_SCALING_DYNAMIC_YARN, .factor = 4}, dca_factor = {.mode = ROPE_SCALING_DCA, .factor = 2},
                  longrope = {.mode = ROPE_SCALING_LONGROPE};
    ok &= rope_params_resolve(&out, &trained, 2048, &group_pi, err, sizeof(err)) == ROPE_KNOB_NOT_TAKEN &&
          !strcmp(err, "--grp-attn-n is used only by --rope-scaling selfextend");
    ok &= rope_params_resolve(&out, &trained, 2048, &chunk_se, err, sizeof(err)) == ROPE_KNOB_NOT_TAKEN &&
          !strcmp(err, "--dca-chunk is used only by --rope-scaling dca");
    ok &= rope_params_resolve(&out, &trained, 2048, &se_factor, err, sizeof(err)) == ROPE_FACTOR_NOT_TAKEN &&
          strstr(err, "(hint: --grp-attn-n G");
    ok &= rope_params_resolve(&out, &trained, 2048, &dy_factor, err, sizeof(err)) == ROPE_FACTOR_NOT_TAKEN;
    ok &= rope_params_resolve(&out, &trained, 2048, &dca_factor, err, sizeof(err)) == ROPE_FACTOR_NOT_TAKEN;
    ok &= rope_params_resolve(&out, &trained, 2048, &longrope, err, sizeof(err)) == ROPE_NO_PAIR_FACTORS;
    ok &= rope_params_resolve(&out, &trained, 2048, &wide, err, sizeof(err)) == ROPE_BAD_VALUE && strstr(err, "[1, L]");
    // A checkpoint with its own scaling (Llama 3.1) keeps its factor at any context.
    RopeParams l31 = params(ROPE_SCALING_LLAMA3, 128, 5e5, 8192, 8);
    ok &= rope_params_resolve(&out, &l31, 131072, &keep, err, sizeof(err)) == 0 && out.mode == ROPE_SCALING_LLAMA3 &&
          out.factor == 8 && out.low_freq_factor == 1 && out.high_freq_factor == 4;
    // dynamic: no factor given -> 1 (alpha = l / L); a given factor is kept; so is a checkpoint's own.
    RopeOverrides dyn = {.mode = ROPE_SCALING_DYNAMIC}, dyn4 = {.mode = ROPE_SCALING_DYNAMIC, .factor = 4};
    ok &= rope_params_resolve(&out, &trained, 2048, &dyn, err, sizeof(err)) == 0 && out.factor == 1;
    ok &= rope_params_resolve(&out, &trained, 2048, &dyn4, err, sizeof(err)) == 0 && out.factor == 4;
    RopeParams own_dyn = params(ROPE_SCALING_DYNAMIC, 8, 1e4, 512, 2);
    ok &= rope_params_resolve(&out, &own_dyn, 4096, &keep, err, sizeof(err)) == 0 && out.factor == 2;
    check_true("rope_params_resolve: factor ctx/L or 1 (none: 1; dynamic: 1), overrides, own factor, alpha: ntk", ok);
}

// docs/rope-test-vectors.md section 3 "Layout": d = 8, b = 1e4, x = [1..8], interleaved, positions 1 and 3.
static void test_layout(void) {
    static const double want1[8] = {-1.1426397, 1.9220756, 2.5856788, 4.2795169,
                                    4.9397510,  6.0496992, 6.9919965, 8.0069960};
    static const double want3[8] = {-1.2722325, -1.8388650, 1.6839286, 4.7079066,
                                    4.8177772,  6.1472777,  6.9759685, 8.0209640};
    RopeParams p = params(ROPE_SCALING_NONE, 8, 1e4, 512, 1);
    Rope r;
    init_or_die(&r, &p, 4);
    double inv_want[4] = {1, 0.1, 0.01, 0.001}, dinv = 0;
    for (int i = 0; i < 4; i++)
        dinv = fmax(dinv, fabs(r.inv_freq[i] - inv_want[i]) / inv_want[i]);
    check("layout d=8: inv_freq = 1, 0.1, 0.01, 0.001 (relative)", dinv, 1e-15);
    const int pos[2] = {1, 3};
    const double *want[2] = {want1, want3};
    for (int t = 0; t < 2; t++) {
        float x[8];
        for (int j = 0; j < 8; j++)
            x[j] = (float)(j + 1);
        rope_rotate(&r, x, pos[t]);
        double diff = 0;
        for (int j = 0; j < 8; j++)
            diff = fmax(diff, fabs(x[j] - want[t][j]));
        char what[96];
        snprintf(what, sizeof(what), "layout d=8 x=[1..8] interleaved pos=%d vs docs/rope-test-vectors.md s3", pos[t]);
        check(what, diff, 2e-6); // printed to 7 decimals; float32 spacing at 8 is 9.5e-7
    }
    rope_free(&r);
}

// Every table entry is float(mscale * cos(m * theta_i)) with m * theta_i in double.
static void test_tables(RopeScaling mode, const Rope *r) {
    const int half = r->p.head_dim / 2;
    double diff = 0;
    for (int m = 0; m < r->n_pos; m += (m < 4096 ? 1 : 997)) {
        for (int i = 0; i < half; i++) {
            double a = m * r->inv_freq[i];
            diff = fmax(diff, fabs(r->cos[(size_t)m * half + i] - r->mscale * cos(a)));
            diff = fmax(diff, fabs(r->sin[(size_t)m * half + i] - r->mscale * sin(a)));
        }
    }
    char what[96];
    snprintf(what, sizeof(what), "%s tables = mscale*cos/sin(m*theta) in double, m < %d", rope_scaling_name(mode),
             r->n_pos);
    check(what, diff / r->mscale, 6.0e-8); // float32 rounding of a value <= 1: at most 2^-24
}

// R(a) R(b) x == R(a+b) x, with the float tables (a yarn table rotation also scales by m_s, so two
// of them scale by m_s^2) and in double from rope_inv_freq.
static void test_composition(RopeScaling mode, const Rope *r) {
    const int d = r->p.head_dim;
    static const int ab[][2] = {{45, 300}, {1000, 3000}, {49999, 50000}, {7, 99993}};
    double diff = 0, diff_d = 0;
    for (size_t t = 0; t < sizeof(ab) / sizeof(ab[0]); t++) {
        float x2[256], x1[256];
        double y2[256], y1[256];
        for (int j = 0; j < d; j++)
            x2[j] = x1[j] = (float)(y2[j] = y1[j] = cos(j));
        rope_rotate(r, x2, ab[t][0]);
        rope_rotate(r, x2, ab[t][1]);
        rope_rotate(r, x1, ab[t][0] + ab[t][1]);
        for (int j = 0; j < d; j++)
            diff = fmax(diff, fabs(x2[j] / r->mscale - x1[j]) / r->mscale);
        if (t == 0) { // in double only at small positions: at 1e5 the angle itself is rounded by ~1e-11
            rotate_double(y2, r->inv_freq, 1, d, ab[t][0]);
            rotate_double(y2, r->inv_freq, 1, d, ab[t][1]);
            rotate_double(y1, r->inv_freq, 1, d, ab[t][0] + ab[t][1]);
            for (int j = 0; j < d; j++)
                diff_d = fmax(diff_d, fabs(y2[j] - y1[j]));
        }
    }
    char what[96];
    snprintf(what, sizeof(what), "%s composition R(a)R(b) = R(a+b), float tables, a+b <= 1e5", rope_scaling_name(mode));
    check(what, diff, 1e-6);
    snprintf(what, sizeof(what), "%s composition R(45)R(300) = R(345), double", rope_scaling_name(mode));
    check(what, diff_d, 1e-13); // docs/rope-test-vectors.md section 3: 1.7e-14
}

// <R(n+5) q, R(n) k> at n = 2, 4002, 100000: equal to each other and to the double value.
// `printed` is docs/rope-test-vectors.md section 3's value (0 where the document has none; then rope_inv_freq in double).
static void test_relative(RopeScaling mode, const Rope *r, double printed) {
    const int d = r->p.head_dim;
    float q0[64], k0[64];
    double qd0[64], kd0[64];
    fill_qk(q0, k0, qd0, kd0, d);
    static const int ns[3] = {2, 4002, 100000};
    double exact = printed, diff = 0, spread = 0, first = 0;
    if (exact == 0) { // no printed value: the double-precision dot at n = 2
        double qd[64], kd[64];
        memcpy(qd, qd0, sizeof(qd));
        memcpy(kd, kd0, sizeof(kd));
        rotate_double(qd, r->inv_freq, r->mscale, d, 7);
        rotate_double(kd, r->inv_freq, r->mscale, d, 2);
        exact = dot_d(qd, kd, d);
    }
    for (int t = 0; t < 3; t++) {
        float q[64], k[64];
        memcpy(q, q0, sizeof(q));
        memcpy(k, k0, sizeof(k));
        rope_rotate(r, q, ns[t] + 5);
        rope_rotate(r, k, ns[t]);
        double dot = dot_f(q, k, d);
        if (t == 0) first = dot;
        diff = fmax(diff, fabs(dot - exact) / fabs(exact));
        spread = fmax(spread, fabs(dot - first) / fabs(exact));
    }
    char what[96];
    snprintf(what, sizeof(what), "%s <R(n+5)q,R(n)k> n=2,4002,1e5 vs %.12f (rel)", rope_scaling_name(mode), exact);
    // fp32 tables of angles formed in double: ~3e-8; angles formed in fp32 would give ~1e-3 at 1e5.
    check(what, diff, 1e-6);
    snprintf(what, sizeof(what), "%s <R(n+5)q,R(n)k> independent of n (rel)", rope_scaling_name(mode));
    check(what, spread, 1e-6);
}

// |R(12345) q| = m_s |q| (docs/rope-test-vectors.md section 3: |q| = 5.704293751457; yarn s=4: 6.495076777639).
static void test_norm(RopeScaling mode, const Rope *r, double printed) {
    const int d = r->p.head_dim;
    float q[64], k[64];
    double qd[64], kd[64];
    fill_qk(q, k, qd, kd, d);
    double n0 = sqrt(dot_d(qd, qd, d));
    rope_rotate(r, q, 12345);
    double n1 = sqrt(dot_f(q, q, d));
    char what[96];
    snprintf(what, sizeof(what), "%s |R(12345) q| = %.12f (rel)", rope_scaling_name(mode), printed);
    check(what, fmax(fabs(n1 - printed), fabs(n0 * r->mscale - printed)) / printed, 1e-6);
}

// docs/rope-test-vectors.md section 3 property tests for each mode with fixed frequencies; d = 64, b = 1e4, L = 2048, s = 4.
static void test_fixed_modes(void) {
    struct {
        RopeScaling mode;
        double dot, norm;
    } cases[] = {
        {ROPE_SCALING_NONE, 22.550544960148, 5.704293751457},
        {ROPE_SCALING_PI, 27.827439574174, 5.704293751457},
        {ROPE_SCALING_NTK, 23.208062233831, 5.704293751457},
        {ROPE_SCALING_YARN, 0, 6.495076777639},
        {ROPE_SCALING_LLAMA3, 0, 5.704293751457},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        RopeParams p = params(cases[c].mode, 64, 1e4, 2048, 4);
        Rope r;
        init_or_die(&r, &p, 100010);
        test_tables(cases[c].mode, &r);
        test_composition(cases[c].mode, &r);
        test_relative(cases[c].mode, &r, cases[c].dot);
        test_norm(cases[c].mode, &r, cases[c].norm);
        unsigned v = r.version;
        rope_set_length(&r, 8192);
        char what[96];
        snprintf(what, sizeof(what), "%s: not dynamic, rope_set_length changes nothing",
                 rope_scaling_name(cases[c].mode));
        check_true(what, r.version == v && !rope_is_dynamic(&r));
        rope_free(&r);
    }
}

// Dynamic NTK: frequencies follow the length; version moves exactly when they change.
static void test_dynamic(void) {
    const int d = 64, L = 2048;
    RopeParams p = params(ROPE_SCALING_DYNAMIC, d, 1e4, L, 4);
    Rope r;
    init_or_die(&r, &p, 4 * L + 10);
    check_true("dynamic: rope_is_dynamic", rope_is_dynamic(&r));
    double def[32], want[32], ms, eb, diff = 0;
    RopeParams pn = params(ROPE_SCALING_NONE, d, 1e4, L, 4);
    rope_inv_freq(&pn, 0, def, &ms, &eb);
    unsigned v0 = r.version;
    rope_set_length(&r, L / 2);
    for (int i = 0; i < d / 2; i++)
        diff = fmax(diff, fabs(r.inv_freq[i] - def[i]) / def[i]);
    rope_set_length(&r, L);
    for (int i = 0; i < d / 2; i++)
        diff = fmax(diff, fabs(r.inv_freq[i] - def[i]) / def[i]);
    check("dynamic: at l = L/2 and L the frequencies are the unscaled ones", diff, 0);
    check_true("dynamic: version unchanged for l <= L", r.version == v0 && r.eff_base == 1e4);

    rope_set_length(&r, 2 * L);
    unsigned v1 = r.version;
    rope_inv_freq(&r.p, 2 * L, want, &ms, &eb);
    diff = 0;
    for (int i = 0; i < d / 2; i++)
        diff = fmax(diff, fabs(r.inv_freq[i] - want[i]) / want[i]);
    check("dynamic: at l = 2L the tables use rope_inv_freq(p, 2L)", diff, 0);
    check_true("dynamic: version increased at l = 2L, base grew", v1 > v0 && r.eff_base > 1e4);
    diff = 0;
    for (int m = 0; m < 2 * L; m++)
        for (int i = 0; i < d / 2; i++)
            diff = fmax(diff, fabs(r.cos[(size_t)m * d / 2 + i] - cos(m * want[i])) +
                                  fabs(r.sin[(size_t)m * d / 2 + i] - sin(m * want[i])));
    check("dynamic: rows m < 2L hold cos/sin of the new frequencies", diff, 1.2e-7);
    rope_set_length(&r, 2 * L);
    check_true("dynamic: setting the same length again keeps the version", r.version == v1);

    // Relative position holds at one fixed length ...
    float q0[64], k0[64], q[64], k[64];
    double qd[64], kd[64];
    fill_qk(q0, k0, qd, kd, d);
    rope_set_length(&r, 4 * L);
    memcpy(q, q0, sizeof(q));
    memcpy(k, k0, sizeof(k));
    rope_rotate(&r, q, 4007);
    rope_rotate(&r, k, 4002);
    double same = dot_f(q, k, d);
    memcpy(q, q0, sizeof(q));
    memcpy(k, k0, sizeof(k));
    rope_rotate(&r, q, 7);
    rope_rotate(&r, k, 2);
    check("dynamic: at fixed l = 4L, <R(n+5)q,R(n)k> same at n=2 and 4002 (rel)",
          fabs(dot_f(q, k, d) - same) / fabs(same), 1e-6);
    // ... but a key rotated with the base of l = 2L against a query with the base of l = 4L does
    // not give the same score: why the forward pass re-rotates cached keys when `version` moves.
    rope_set_length(&r, 2 * L);
    memcpy(k, k0, sizeof(k));
    rope_rotate(&r, k, 4002);
    rope_set_length(&r, 4 * L);
    memcpy(q, q0, sizeof(q));
    rope_rotate(&r, q, 4007);
    double mixed = fabs(dot_f(q, k, d) - same) / fabs(same);
    printf("     dynamic: mixing the bases of l = 2L and 4L moves the score by %.3e (relative)\n", mixed);
    check_true("dynamic: mixed bases break relative position (negative test, > 1e-2)", mixed > 1e-2);
    rope_free(&r);
}

// Self-Extend's position rule (Jin et al. 2024, eq. 3): a query at m against a key at n with
// m - n >= W is scored at the grouped positions floor(m / G) + W - floor(W / G) and floor(n / G).
// The far query (rope_rotate_turn at m, turn 1) dotted with the key turned by key table row n must equal q and
// k rotated, in double, to those two positions; below the window the plain rotation serves. Control:
// positions divided without the floor (m / G) give another score.
static void test_selfextend(void) {
    const int d = 16, L = 64, W = 16, G = 4, N = 400;
    RopeParams p = params(ROPE_SCALING_SELFEXTEND, d, 1e4, L, 1);
    p.window = W, p.group = G;
    Rope r;
    init_or_die(&r, &p, N);
    float q[16], k[16];
    double qd[16], kd[16];
    double worst = 0, unfloored = 0;
    const int pairs[][2] = {{100, 3}, {399, 0}, {250, 234}, {37, 21}, {398, 5}};
    for (size_t t = 0; t < sizeof pairs / sizeof pairs[0]; t++) {
        const int m = pairs[t][0], n = pairs[t][1];
        fill_qk(q, k, qd, kd, d);
        rope_rotate_turn(&r, q, m, 1);
        for (int i = 0; i < d / 2; i++) { // the key table row n, as attention turns a cached key
            const float c = r.key_cos[(size_t)n * d / 2 + i], sn = r.key_sin[(size_t)n * d / 2 + i];
            const float x0 = k[2 * i], x1 = k[2 * i + 1];
            k[2 * i] = x0 * c - x1 * sn, k[2 * i + 1] = x0 * sn + x1 * c;
        }
        rotate_double(qd, r.inv_freq, 1, d, m / G + W - W / G);
        rotate_double(kd, r.inv_freq, 1, d, n / G);
        const double want = dot_d(qd, kd, d);
        worst = fmax(worst, fabs(dot_f(q, k, d) - want) / fmax(1, fabs(want)));
        fill_qk(q, k, qd, kd, d);
        rotate_double(qd, r.inv_freq, 1, d, (double)m / G + W - (double)W / G);
        rotate_double(kd, r.inv_freq, 1, d, (double)n / G);
        unfloored = fmax(unfloored, fabs(dot_d(qd, kd, d) - want) / fmax(1, fabs(want)));
    }
    check("selfextend: far score at floor(m/G) + W - floor(W/G) vs floor(n/G)", worst, 1e-5);
    check_true("selfextend: without the floor the score differs (negative test, > 1e-3)", unfloored > 1e-3);
    check_true("selfextend: a far path with a key table of its own", rope_far_path(&p) && rope_key_tables(&p) == 2);
    RopeOverrides none = {.mode = ROPE_SCALING_SELFEXTEND};
    RopeParams trained = params(ROPE_SCALING_NONE, d, 1e4, L, 1), out;
    char err[256];
    // the default G for 256 positions: 255 // 6 + 16 - 2 = 56 < 64, while G = 5 gives 51 + 16 - 3 = 64
    const int resolved = rope_params_resolve(&out, &trained, 256, &none, err, sizeof err) == ROPE_OK;
    check_true("selfextend: default W = L/4, G the smallest that keeps 256 positions inside L (6), factor 1",
               resolved && out.window == 16 && out.group == 6 && out.factor == 1);
    rope_free(&r);
}

// Dual chunk attention's positions (An et al. 2024; ChunkLlama's q_t, qc_t, k_t): with S = 48, w = 4
// the chunks hold c = 44 positions. Row m of the main table (keys; the intra-chunk query) is at
// m mod c, of the far table (the successive-chunk query) at min(m mod c + c, S), and the inter row at
// S: each row against cos and sin of that position in double. Control: without the clamp at S, the
// successive query's row would differ.
static void test_dca(void) {
    const int d = 16, L = 64, N = 200;
    RopeParams p = params(ROPE_SCALING_DCA, d, 1e4, L, 1);
    p.local_window = 4, p.chunk = 48;
    Rope r;
    init_or_die(&r, &p, N);
    const int c = 44;
    double worst = 0, unclamped = 0;
    for (int m = 0; m < N; m++)
        for (int i = 0; i < d / 2; i++) {
            const double succ = m % c + c < 48 ? m % c + c : 48;
            worst = fmax(worst, fabs(r.cos[m * d / 2 + i] - cos((m % c) * r.inv_freq[i])));
            worst = fmax(worst, fabs(r.sin[m * d / 2 + i] - sin((m % c) * r.inv_freq[i])));
            worst = fmax(worst, fabs(r.far_cos[m * d / 2 + i] - cos(succ * r.inv_freq[i])));
            worst = fmax(worst, fabs(r.far_sin[m * d / 2 + i] - sin(succ * r.inv_freq[i])));
            if (m == 0) worst = fmax(worst, fabs(r.inter_cos[i] - cos(48 * r.inv_freq[i])));
            unclamped = fmax(unclamped, fabs(r.far_cos[m * d / 2 + i] - cos((m % c + c) * r.inv_freq[i])));
        }
    check("dca: keys and intra at m mod c, successive min(m mod c + c, S), inter S", worst, 1e-6);
    check_true("dca: the successive query clamped at S (negative test, > 1e-3)", unclamped > 1e-3);
    check_true("dca: three turns of each query, keys un-rotated", rope_query_turns(&p) == 3 && rope_keys_unrotated(&p));
    RopeOverrides dca = {.mode = ROPE_SCALING_DCA};
    RopeParams trained = params(ROPE_SCALING_NONE, d, 1e4, L, 1), out;
    char err[256];
    const int resolved = rope_params_resolve(&out, &trained, 256, &dca, err, sizeof err) == ROPE_OK;
    check_true("dca: default chunk 3 L / 4 = 48, local window L / 16 = 4", resolved && out.chunk == 48 && out.local_window == 4 &&
               out.window == 0);
    rope_free(&r);
}

// Dynamic YaRN's rule: at length l its frequencies and magnitude are static YaRN's with s = l / L
// (and none's up to L); control: at l = 2L they are not those of l = 4L.
static void test_dynamic_yarn(void) {
    const int d = 64, L = 512;
    RopeParams dyn = params(ROPE_SCALING_DYNAMIC_YARN, d, 1e4, L, 1);
    char err[256];
    rope_params_defaults(&dyn, L);
    check_true("dynamic-yarn: parameters accepted", rope_params_check(&dyn, err, sizeof err) == 0);
    double worst = 0, apart = 0;
    const int lengths[] = {100, 512, 700, 2048, 5000};
    for (size_t k = 0; k < sizeof lengths / sizeof lengths[0]; k++) {
        const int l = lengths[k];
        RopeParams yarn = params(l > L ? ROPE_SCALING_YARN : ROPE_SCALING_NONE, d, 1e4, L, l > L ? (double)l / L : 1);
        rope_params_defaults(&yarn, L);
        double a[32], b[32], c[32], ma, mb, mc, ea, eb, ec;
        rope_inv_freq(&dyn, l, a, &ma, &ea);
        rope_inv_freq(&yarn, l, b, &mb, &eb);
        rope_inv_freq(&dyn, 2 * l, c, &mc, &ec);
        worst = fmax(worst, fabs(ma - mb));
        for (int i = 0; i < d / 2; i++) {
            worst = fmax(worst, fabs(a[i] - b[i]) / b[i]);
            if (l > L) apart = fmax(apart, fabs(a[i] - c[i]) / c[i]);
        }
    }
    check("dynamic-yarn: at length l, static yarn with s = l / L (none up to L)", worst, 1e-15);
    check_true("dynamic-yarn: the length matters (negative test: l and 2l differ by > 1e-2)", apart > 1e-2);
}

// What attention reads (rope.h): per mode, rope_attention's turns and key tables, and rope_segments.
// For one query at m, the segments partition the keys 0 .. m, and each key's turn and table are the
// mode's rule written here from the README (rerope, leaky-rerope, selfextend: far when m - n >= W;
// dca: by the key's chunk against the query's); for a run of queries m0 .. m1, each query's segment
// lies inside the run's segment of the same turn and table, and the run's segments cover each key as
// many times as its queries score it in different ways: once where they agree, so a task scores a key
// twice only where its queries disagree (at a window's edge; across a chunk boundary, the chunks on
// either side). Control: a rule whose window is off by one disagrees.
static int rule_turn(const RopeParams *p, int m, int n, int window) {
    if (p->mode == ROPE_SCALING_DCA) {
        const int c = p->chunk - p->local_window, gap = m / c - n / c;
        return gap == 0 ? 0 : gap == 1 ? 1 : 2;
    }
    return rope_far_path(p) && m - n >= window ? 1 : 0;
}

static void test_segments(void) {
    const int d = 8, L = 64, N = 300;
    const RopeScaling modes[] = {ROPE_SCALING_NONE, ROPE_SCALING_DYNAMIC, ROPE_SCALING_REROPE,
                                 ROPE_SCALING_LEAKY_REROPE, ROPE_SCALING_SELFEXTEND, ROPE_SCALING_DCA};
    const int turns[] = {1, 1, 2, 2, 2, 3}, tables[] = {0, 1, 1, 2, 2, 1};
    int rule_ok = 1, union_ok = 1, twice_ok = 1, shape_ok = 1, off_by_one_seen = 0;
    float *mem = malloc(2 * rope_key_floats(&(RopeParams){.head_dim = d}, N) * sizeof(float));
    for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
        RopeParams p = params(modes[k], d, 1e4, L, modes[k] == ROPE_SCALING_LEAKY_REROPE ? 3 : 1);
        if (modes[k] == ROPE_SCALING_SELFEXTEND) p.group = 4;
        p.window = rope_far_path(&p) ? 16 : 0;
        p.local_window = modes[k] == ROPE_SCALING_DCA ? 4 : 0;
        p.chunk = modes[k] == ROPE_SCALING_DCA ? 48 : 0;
        Rope r;
        init_or_die(&r, &p, N);
        rope_set_keys(&r, mem);
        const RopeAttention a = rope_attention(&r, 1), nope = rope_attention(&r, 0);
        shape_ok &= a.turns == turns[k] && rope_key_tables(&p) == tables[k] && !!a.keys[0] == (tables[k] > 0) &&
                    !!a.keys[1] == (tables[k] > 1) && nope.turns == 1 && !nope.keys[0] && !nope.keys[1];
        for (int m = 0; m < N; m += 7) {
            RopeSegment seg[ROPE_MAX_SEGMENTS];
            const int count = rope_segments(&a, m, m, seg);
            int next = 0;
            for (int s = 0; s < count; s++) {
                rule_ok &= seg[s].from == next && seg[s].to > seg[s].from;
                for (int n = seg[s].from; n < seg[s].to; n++) {
                    rule_ok &= seg[s].turn == rule_turn(&p, m, n, p.window) && seg[s].turn < a.turns;
                    rule_ok &= (seg[s].key == 1) == (rope_far_path(&p) && seg[s].turn == 1);
                    off_by_one_seen |= rope_far_path(&p) && seg[s].turn != rule_turn(&p, m, n, p.window + 1);
                }
                next = seg[s].to;
            }
            rule_ok &= next == m + 1;
            for (int m1 = m; m1 < N && m1 < m + 16; m1 += 5) { // a task's run of queries m .. m1
                RopeSegment run[ROPE_MAX_SEGMENTS], own[ROPE_MAX_SEGMENTS];
                const int runs = rope_segments(&a, m, m1, run);
                int scored = 0, ways = 0;
                for (int s = 0; s < runs; s++)
                    scored += run[s].to - run[s].from;
                for (int n = 0; n <= m1; n++) { // the distinct turns the run's queries score key n with
                    int seen[3] = {0, 0, 0};
                    for (int mq = m > n ? m : n; mq <= m1; mq++)
                        seen[rule_turn(&p, mq, n, p.window)] = 1;
                    ways += seen[0] + seen[1] + seen[2];
                }
                twice_ok &= scored == ways;
                for (int mq = m; mq <= m1; mq++)
                    for (int o = 0, owns = rope_segments(&a, mq, mq, own); o < owns; o++) {
                        int inside = 0;
                        for (int s = 0; s < runs; s++)
                            inside |= run[s].turn == own[o].turn && run[s].key == own[o].key &&
                                      run[s].from <= own[o].from && own[o].to <= run[s].to;
                        union_ok &= inside;
                    }
            }
        }
        rope_free(&r);
    }
    free(mem);
    check_true("segments: turns and key tables per mode, a NoPE layer one turn and none", shape_ok);
    check_true("segments: one query's partition its keys by the mode's rule", rule_ok);
    check_true("segments: a run's hold each of its queries'", union_ok);
    check_true("segments: a run's cover a key once per way its queries score it", twice_ok);
    check_true("segments: the rule with the window off by one disagrees (negative test)", off_by_one_seen);
}

int main(void) {
    test_names();
    test_params_check();
    test_resolve();
    test_layout();
    test_fixed_modes();
    test_dynamic();
    test_selfextend();
    test_dca();
    test_dynamic_yarn();
    test_segments();
    if (n_failed) {
        printf("test_rope: FAILED %d of %d checks\n", n_failed, n_checks);
        return 1;
    }
    printf("test_rope: all %d checks passed\n", n_checks);
    return 0;
}
