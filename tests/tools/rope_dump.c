// rope_dump.c - print what rope.c computes for one set of RoPE parameters, for the Python tests.
//
// What this is: a thin command-line wrapper around rope.h. tests/test_rope_tables.py runs it and
// compares every number with lrun/rope_ref.py, an independent float64 implementation.
// What this is not: a test by itself (it checks nothing but its arguments).
//
// Usage:
//   tests/tools/rope_dump --mode NAME --head-dim D --base B --orig-ctx L --factor S
//                         [--alpha A] [--length l] [--attn-factor F] [--beta-fast X] [--beta-slow Y]
//                         [--low-freq-factor a] [--high-freq-factor b] --positions p1,p2,...
//                         [--rotate x_0,...,x_{d-1}] [--rot-dims R]
//                         [--short-factor f_0,...] [--long-factor f_0,...]   (longrope: R/2 each)
//
// Output (stdout), one record per line, fields separated by single spaces, reals as %.17g:
//   params MODE head_dim orig_ctx base factor alpha attn_factor beta_fast beta_slow lf hf rot_dims
//                                   (after rope_params_defaults filled in the defaults at L)
//   inv_freq v_0 ... v_{d/2-1}      rope_inv_freq(p, length) with length = --length or 0
//   mscale x                        ... its mscale
//   eff_base x                      ... its eff_base
//   table_inv_freq v_0 ...          Rope.inv_freq after rope_init (+ rope_set_length if --length)
//   table_mscale x / table_eff_base x / table_length n / table_version n / n_pos n
//   cos POS c_0 ... c_{d/2-1}       Rope.cos row POS (float32 values printed exactly)
//   sin POS s_0 ... s_{d/2-1}       Rope.sin row POS
//   rotated POS y_0 ... y_{d-1}     with --rotate: rope_rotate(x, POS) (float32, printed exactly)
// Exit codes: 0 ok, 1 rope.c refused the parameters, 2 usage error.
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rope.h"

#define MAX_POSITIONS 64
#define MAX_ROTATE    1024

static void usage(const char *why) {
    fprintf(stderr,
            "error: %s\n"
            "usage: rope_dump --mode NAME --head-dim D --base B --orig-ctx L --factor S [--alpha A]\n"
            "                 [--length l] [--attn-factor F] [--beta-fast X] [--beta-slow Y]\n"
            "                 [--low-freq-factor a] [--high-freq-factor b] --positions p1,p2,...\n"
            "                 [--rotate x_0,...,x_{d-1}] [--rot-dims R] [--short-factor f,...]\n"
            "                 [--long-factor f,...]\n",
            why);
    exit(2);
}

static double parse_real(const char *flag, const char *s) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end) {
        fprintf(stderr, "error: %s: '%s' is not a number\n", flag, s);
        exit(2);
    }
    return v;
}

static int parse_int(const char *flag, const char *s, long max) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 0 || v > max) {
        fprintf(stderr, "error: %s: '%s' is not an integer in [0, %ld]\n", flag, s, max);
        exit(2);
    }
    return (int)v;
}

// "0,1,511" -> positions; returns the count.
static int parse_positions(const char *s, int *pos) {
    int n = 0;
    char buf[1024];
    if (strlen(s) >= sizeof(buf)) usage("--positions: list too long");
    strcpy(buf, s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (n == MAX_POSITIONS) usage("--positions: at most 64 positions");
        pos[n++] = parse_int("--positions", tok, 100000000L); // tables hold max+1 rows
    }
    if (n == 0) usage("--positions: empty list");
    return n;
}

// "1,2.5,-3" -> x (double); returns the count.
static int parse_doubles(const char *flag, const char *s, double *x) {
    int n = 0;
    char buf[16384];
    if (strlen(s) >= sizeof(buf)) usage("list too long");
    strcpy(buf, s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (n == MAX_ROTATE) usage("at most 1024 values");
        x[n++] = parse_real(flag, tok);
    }
    return n;
}

// "1,2.5,-3" -> x (float); returns the count.
static int parse_reals(const char *flag, const char *s, float *x) {
    int n = 0;
    char buf[16384];
    if (strlen(s) >= sizeof(buf)) usage("--rotate: list too long");
    strcpy(buf, s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (n == MAX_ROTATE) usage("--rotate: at most 1024 values");
        x[n++] = (float)parse_real(flag, tok);
    }
    return n;
}

static void print_row(const char *name, const double *v, int n) {
    printf("%s", name);
    for (int i = 0; i < n; i++)
        printf(" %.17g", v[i]);
    printf("\n");
}

static void print_frow(const char *name, int pos, const float *v, int n) {
    printf("%s %d", name, pos);
    for (int i = 0; i < n; i++)
        printf(" %.9g", (double)v[i]); // 9 digits round-trip a float
    printf("\n");
}

int main(int argc, char **argv) {
    RopeParams p;
    memset(&p, 0, sizeof(p));
    int have_mode = 0, length = 0, npos = 0, nrot = 0;
    int positions[MAX_POSITIONS];
    float rot[MAX_ROTATE]; // --rotate: one head to rotate to every position
    double lambda[2][MAX_ROTATE]; // --short-factor, --long-factor
    int nfactors[2] = {0, 0};

    for (int a = 1; a < argc; a++) {
        const char *flag = argv[a];
        if (a + 1 >= argc) usage("every flag takes a value");
        const char *val = argv[++a];
        if (!strcmp(flag, "--mode")) {
            RopeScaling m;
            if (rope_scaling_from_name(val, &m)) usage("--mode: unknown name");
            p.mode = m;
            have_mode = 1;
        } else if (!strcmp(flag, "--head-dim")) {
            p.head_dim = parse_int(flag, val, 1 << 16);
        } else if (!strcmp(flag, "--base")) {
            p.base = parse_real(flag, val);
        } else if (!strcmp(flag, "--orig-ctx")) {
            p.orig_ctx = parse_int(flag, val, INT_MAX);
        } else if (!strcmp(flag, "--factor")) {
            p.factor = parse_real(flag, val);
        } else if (!strcmp(flag, "--alpha")) {
            p.alpha = parse_real(flag, val);
        } else if (!strcmp(flag, "--length")) {
            length = parse_int(flag, val, INT_MAX);
        } else if (!strcmp(flag, "--attn-factor")) {
            p.attn_factor = parse_real(flag, val);
        } else if (!strcmp(flag, "--beta-fast")) {
            p.beta_fast = parse_real(flag, val);
        } else if (!strcmp(flag, "--beta-slow")) {
            p.beta_slow = parse_real(flag, val);
        } else if (!strcmp(flag, "--low-freq-factor")) {
            p.low_freq_factor = parse_real(flag, val);
        } else if (!strcmp(flag, "--high-freq-factor")) {
            p.high_freq_factor = parse_real(flag, val);
        } else if (!strcmp(flag, "--rotate")) {
            nrot = parse_reals(flag, val, rot);
        } else if (!strcmp(flag, "--rot-dims")) {
            p.rot_dims = parse_int(flag, val, 1 << 16);
        } else if (!strcmp(flag, "--short-factor") || !strcmp(flag, "--long-factor")) {
            const int k = flag[2] == 'l';
            nfactors[k] = parse_doubles(flag, val, lambda[k]);
            *(k ? &p.long_factor : &p.short_factor) = lambda[k];
        } else if (!strcmp(flag, "--positions")) {
            npos = parse_positions(val, positions);
        } else {
            usage("unknown flag");
        }
    }
    if (!have_mode || p.head_dim == 0 || p.base == 0 || p.orig_ctx == 0 || npos == 0)
        usage("--mode, --head-dim, --base, --orig-ctx and --positions are required");
    if (nrot && nrot != p.head_dim) usage("--rotate needs exactly --head-dim values");

    if ((nfactors[0] || nfactors[1]) && (nfactors[0] != nfactors[1] || nfactors[0] != (p.rot_dims ? p.rot_dims : p.head_dim) / 2))
        usage("--short-factor and --long-factor need rot_dims / 2 values each");
    char err[256];
    rope_params_defaults(&p, p.orig_ctx); // the fields left 0, as at the trained context
    if (rope_params_check(&p, err, sizeof(err))) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    printf("params %s %d %d %.17g %.17g %.17g %.17g %.17g %.17g %.17g %.17g %d\n", rope_scaling_name(p.mode), p.head_dim,
           p.orig_ctx, p.base, p.factor, p.alpha, p.attn_factor, p.beta_fast, p.beta_slow, p.low_freq_factor,
           p.high_freq_factor, p.rot_dims);

    // The pure function first.
    const int half = p.head_dim / 2;
    double *inv = malloc((size_t)half * sizeof(double));
    if (!inv) {
        fprintf(stderr, "error: out of memory\n");
        return 1;
    }
    double mscale, eff_base;
    rope_inv_freq(&p, length, inv, &mscale, &eff_base);
    print_row("inv_freq", inv, half);
    printf("mscale %.17g\neff_base %.17g\n", mscale, eff_base);
    free(inv);

    // Then the tables, as the forward pass sees them.
    int n_pos = 0;
    for (int k = 0; k < npos; k++)
        if (positions[k] + 1 > n_pos) n_pos = positions[k] + 1;
    Rope r;
    if (rope_init(&r, &p, n_pos, err, sizeof(err))) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    if (length > 0) rope_set_length(&r, length);
    print_row("table_inv_freq", r.inv_freq, half);
    printf("table_mscale %.17g\ntable_eff_base %.17g\ntable_length %d\ntable_version %u\nmax_pos %d\n", r.mscale,
           r.eff_base, r.length, r.version, r.n_pos);
    for (int k = 0; k < npos; k++) {
        print_frow("cos", positions[k], r.cos + (size_t)positions[k] * half, half);
        print_frow("sin", positions[k], r.sin + (size_t)positions[k] * half, half);
    }
    for (int k = 0; k < npos && nrot; k++) {
        float x[MAX_ROTATE];
        memcpy(x, rot, (size_t)nrot * sizeof(float));
        rope_rotate(&r, x, positions[k]);
        print_frow("rotated", positions[k], x, nrot);
    }
    rope_free(&r);
    return 0;
}
