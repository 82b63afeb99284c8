/* The margin-model step of attnsvm, compiled: the two passes over the tokens of
 * attnsvm.models.AttentionClassifier.grad for a bilinear score a_it = x_it^T W z_i and a fixed
 * linear head (token values g_it = v^T x_it given), float64, row-major contiguous arrays.
 *
 * It computes exactly the quantities of attnsvm.models.attention.softmax_jacobian, in the same
 * order of operations where it matters (top token = first largest score; a_(2) = largest of
 * the others; s^_t = exp(a_t - a_(2)), 0 at the top), and leaves the per-sequence log-space
 * scalars (log1p, the loss) to the caller. The exponential is a branch-free Cody-Waite
 * reduction with a degree-13 polynomial, within 2 ulp of libm on [-745, 0] (the arguments are
 * a_t - a_(2) <= 0, and the top token's own, clamped to 0 and overwritten), so that the loops
 * over tokens vectorize. Scratch is allocated once per call on the heap (return code 3 if that
 * fails; 1 for sizes out of range; 2 for a shape this library was not compiled for).
 *
 * Pass 1, jacobian_terms: for every trial b and sequence i
 *     Wz = W_b z_bi, a_t = x_bit^T Wz, top, a_(2), sh_t, Ssh = sum sh, shG = sum sh g,
 *     gap = a_(2) - a_top, g_top, e^gap
 * (the exponentials of a trial's sequences in one loop, so that they overlap).
 * Pass 2, weighted_grad: given the coefficient c_bi and f_bi, s_top_bi (computed by the caller)
 *     q_t = c sh_t (g_t - f) (t != top),  q_top = c s_top (g_top Ssh - shG),
 *     xbar = sum_t q_t x_bit,  G_W[b] = sum_i xbar z_bi^T (a trial's xbar first, then the sum
 *     row by row in registers).
 * The (K, Q) parameterization (W = K Q^T, K and Q of shape (d, m)) has its own two passes,
 * which never form W or its gradient: Wz = K (Q^T z) (Q^T z kept for pass 2), and
 *     grad_K = sum_i xbar_i (Q^T z_i)^T,   grad_Q = sum_i z_i (K^T xbar_i)^T.
 *
 * Trials [b0, b1) only, so that a caller may split the trials between threads. Compiled with
 * -DFIX_T=T -DFIX_D=d -DFIX_M=m, a library serves only that shape (and returns 2 for any
 * other), with every token and feature loop of known length; m = 0 for the W functions.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAXD 256          /* the feature dimensions d and m */
#define MAXWORK 16777216  /* doubles of one call's scratch (heap): d*max(d,m) + n*(T+d+m+2) */

#if defined(FIX_T) && defined(FIX_D)
/* compile-time sizes: unrolled loops, no remainder loops */
#define FIX_SHAPE() do { if (T != FIX_T || d != FIX_D) return 2; T = FIX_T; d = FIX_D; } while (0)
#else
#define FIX_SHAPE() do { } while (0)
#endif
#if defined(FIX_M)
#define FIX_RANK() do { if (m != FIX_M) return 2; m = FIX_M; } while (0)
#else
#define FIX_RANK() do { } while (0)
#endif

static inline double exp_nonpos(double x)
{
    /* exp(min(x, 0)), branch-free: x = -inf and x < -745.2 give 0, x >= 0 gives 1 (the top
     * token's own argument, overwritten by the caller), NaN gives NaN. The argument is clamped
     * to [-745.2, 0] (NaN to 0) before any conversion, so every integer operation is defined. */
    const double log2e = 1.4426950408889634074;
    const double ln2_hi = 6.93147180369123816490e-01;
    const double ln2_lo = 1.90821492927058770002e-10;
    double xc = x < -745.2 ? -745.2 : (x > 0.0 ? 0.0 : x);
    xc = (x == x) ? xc : 0.0;                           /* NaN: a defined path, NaN returned */
    /* round to nearest (even) by the 1.5 * 2^52 shift: exact for |x| < 2^51, no libm call */
    double n = (xc * log2e + 6755399441055744.0) - 6755399441055744.0;
    double r = (xc - n * ln2_hi) - n * ln2_lo;          /* |r| <= ln2/2 */
    double p = 1.0 / 6227020800.0;                      /* 1/13! */
    p = p * r + 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    /* 2^n in two factors, so that n down to -1075 (subnormal results) stays exact */
    int64_t ni = (int64_t)n;
    int64_t n1 = ni / 2, n2 = ni - n1;
    union { double d; int64_t i; } s1, s2;
    s1.i = (n1 + 1023) << 52;
    s2.i = (n2 + 1023) << 52;
    double e = p * s1.d * s2.d;
    e = x < -745.2 ? 0.0 : e;
    return (x == x) ? e : x;
}

/* out (cols) = v^T A for A (rows x cols, row-major) and v (rows), row by row, so that the
 * inner loop runs along a contiguous row and vectorizes (restrict: the three never overlap,
 * which the compiler cannot see for heap scratch) */
static inline void vecmat(int64_t rows, int64_t cols, const double *restrict A,
                          const double *restrict v, double *restrict out)
{
    for (int64_t c = 0; c < cols; c++)
        out[c] = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        double vr = v[r];
        for (int64_t c = 0; c < cols; c++)
            out[c] += A[r * cols + c] * vr;
    }
}

/* One trial's token loop: from W z_i (rows of Wz, n x d) the scores a_it = x_it^T W z_i (tokens
 * transposed: Xt is n x d x T), the top token of each sequence (first largest), a_(2), the gap
 * a_(2) - a_top and g_top; then the rescaled probabilities sh_it = exp(a_it - a_(2),i) of all
 * the trial's sequences in one loop (independent exponentials, so the polynomial chains
 * overlap), 0 at the top, their sums, and e^gap. a is scratch of n*(T+1), a2 of n. */
static inline void trial_terms(int64_t b, int64_t n, int64_t T, int64_t d, const double *Xt,
                               const double *Wz, const double *G, double *sh, int64_t *top,
                               double *Ssh, double *shG, double *gap, double *Gtop, double *eg,
                               double *restrict a, double *restrict a2v)
{
    for (int64_t i = 0; i < n; i++) {
        double *ai = a + i * T;
        vecmat(d, T, Xt + (b * n + i) * d * T, Wz + i * d, ai);     /* a_t = x_t^T (W z_i) */
        int64_t tp = 0;
        double at = ai[0];
        for (int64_t t = 1; t < T; t++)
            if (ai[t] > at) { at = ai[t]; tp = t; }
        double a2 = -INFINITY;
        for (int64_t t = 0; t < T; t++)
            if (t != tp && ai[t] > a2) a2 = ai[t];
        int64_t bi = b * n + i;
        top[bi] = tp;
        gap[bi] = a2 - at;
        Gtop[bi] = G[bi * T + tp];
        a2v[i] = a2;
    }
    for (int64_t i = 0; i < n; i++)
        for (int64_t t = 0; t < T; t++)
            a[i * T + t] -= a2v[i];
    for (int64_t i = 0; i < n; i++)                      /* the gaps, after the scores */
        a[n * T + i] = gap[b * n + i];
    for (int64_t k = 0; k < n * (T + 1); k++)            /* e^(a - a_(2)) and e^gap */
        a[k] = exp_nonpos(a[k]);
    double *s = sh + b * n * T;
    for (int64_t k = 0; k < n * T; k++)
        s[k] = a[k];
    for (int64_t i = 0; i < n; i++) {
        int64_t bi = b * n + i;
        const double *si = s + i * T, *g = G + bi * T;
        s[i * T + top[bi]] = 0.0;
        double S = 0.0, SG = 0.0;
        for (int64_t t = 0; t < T; t++) {
            S += si[t];
            SG += si[t] * g[t];
        }
        Ssh[bi] = S;
        shG[bi] = SG;
    }
    for (int64_t i = 0; i < n; i++)
        eg[b * n + i] = a[n * T + i];
}

/* xbar_i = X_i^T q_i for every sequence of trial b (rows of xbar, n x d), q from the terms of
 * pass 1 and the coefficient c */
static inline void trial_token_sums(int64_t b, int64_t n, int64_t T, int64_t d,
                                    const double *X, const double *G, const double *sh,
                                    const int64_t *top, const double *Ssh, const double *shG,
                                    const double *Gtop, const double *f, const double *s_top,
                                    const double *c, double *q, double *xbar)
{
    for (int64_t i = 0; i < n; i++) {
        int64_t bi = b * n + i;
        const double *x = X + bi * T * d, *g = G + bi * T, *s = sh + bi * T;
        double ci = c[bi], fi = f[bi];
        for (int64_t t = 0; t < T; t++)
            q[t] = (s[t] * (g[t] - fi)) * ci;
        q[top[bi]] = (s_top[bi] * (Gtop[bi] * Ssh[bi] - shG[bi])) * ci;
        vecmat(T, d, x, q, xbar + i * d);                            /* X_i^T q_i */
    }
}

/* out (rows x cols) = A^T B for A (n x rows), B (n x cols), row by row (row: scratch of cols) */
static inline void gram(int64_t n, int64_t rows, int64_t cols, const double *A, const double *Bm,
                        double *out, double *row)
{
    for (int64_t j = 0; j < rows; j++) {
        for (int64_t k = 0; k < cols; k++)
            row[k] = 0.0;
        for (int64_t i = 0; i < n; i++) {
            double aij = A[i * rows + j];
            for (int64_t k = 0; k < cols; k++)
                row[k] += aij * Bm[i * cols + k];
        }
        for (int64_t k = 0; k < cols; k++)
            out[j * cols + k] = row[k];
    }
}

int jacobian_terms(int64_t b0, int64_t b1, int64_t n, int64_t T, int64_t d,
                   const double *Xt,      /* (B,n,d,T): the tokens transposed */
                   const double *Z,       /* (B,n,d) */
                   const double *W,       /* (B,d,d) */
                   const double *G,       /* (B,n,T) token values */
                   double *sh,            /* out (B,n,T) */
                   int64_t *top,          /* out (B,n) */
                   double *Ssh, double *shG, double *gap, double *Gtop,   /* out (B,n) */
                   double *eg)            /* out (B,n): e^gap */
{
    FIX_SHAPE();
    if (n < 1 || d < 1 || d > MAXD || T > 65536 || T < 2 || d * d + n * (T + d + 2) > MAXWORK)
        return 1;
    double *work = malloc(sizeof(double) * (size_t)(d * d + n * (T + d + 2)));
    if (!work)
        return 3;
    double *Wt = work, *Wz = Wt + d * d, *a = Wz + n * d, *a2v = a + n * (T + 1);
    for (int64_t b = b0; b < b1; b++) {
        const double *Wb = W + b * d * d;
        for (int64_t j = 0; j < d; j++)
            for (int64_t k = 0; k < d; k++)
                Wt[j * d + k] = Wb[k * d + j];
        for (int64_t i = 0; i < n; i++)             /* W z_i = z_i^T W^T */
            vecmat(d, d, Wt, Z + (b * n + i) * d, Wz + i * d);
        trial_terms(b, n, T, d, Xt, Wz, G, sh, top, Ssh, shG, gap, Gtop, eg, a, a2v);
    }
    free(work);
    return 0;
}

int weighted_grad(int64_t b0, int64_t b1, int64_t n, int64_t T, int64_t d,
                  const double *X,        /* (B,n,T,d) */
                  const double *Z,        /* (B,n,d) */
                  const double *G,        /* (B,n,T) */
                  const double *sh, const int64_t *top,
                  const double *Ssh, const double *shG, const double *Gtop,
                  const double *f, const double *s_top, const double *c,   /* (B,n) */
                  double *gW)             /* out (B,d,d) */
{
    FIX_SHAPE();
    if (n < 1 || d < 1 || d > MAXD || T > 65536 || T < 2 || n * d + T + d > MAXWORK)
        return 1;
    double *work = malloc(sizeof(double) * (size_t)(n * d + T + d));
    if (!work)
        return 3;
    double *xbar = work, *q = xbar + n * d, *row = q + T;
    for (int64_t b = b0; b < b1; b++) {
        trial_token_sums(b, n, T, d, X, G, sh, top, Ssh, shG, Gtop, f, s_top, c, q, xbar);
        gram(n, d, d, xbar, Z + b * n * d, gW + b * d * d, row);     /* sum_i xbar_i z_i^T */
    }
    free(work);
    return 0;
}

int jacobian_terms_kq(int64_t b0, int64_t b1, int64_t n, int64_t T, int64_t d, int64_t m,
                      const double *Xt, const double *Z,
                      const double *K, const double *Q,    /* (B,d,m) each */
                      const double *G, double *sh, int64_t *top,
                      double *Ssh, double *shG, double *gap, double *Gtop, double *eg,
                      double *Qz)                          /* out (B,n,m): Q^T z_i */
{
    FIX_SHAPE();
    FIX_RANK();
    if (n < 1 || d < 1 || m < 1 || d > MAXD || m > MAXD || T > 65536 || T < 2
            || m * d + n * (T + d + 2) > MAXWORK)
        return 1;
    double *work = malloc(sizeof(double) * (size_t)(m * d + n * (T + d + 2)));
    if (!work)
        return 3;
    double *Kt = work, *Wz = Kt + m * d, *a = Wz + n * d, *a2v = a + n * (T + 1);
    for (int64_t b = b0; b < b1; b++) {
        const double *Kb = K + b * d * m, *Qb = Q + b * d * m;
        for (int64_t k = 0; k < d; k++)
            for (int64_t r = 0; r < m; r++)
                Kt[r * d + k] = Kb[k * m + r];
        for (int64_t i = 0; i < n; i++) {
            double *qz = Qz + (b * n + i) * m;
            vecmat(d, m, Qb, Z + (b * n + i) * d, qz);              /* Q^T z_i */
            vecmat(m, d, Kt, qz, Wz + i * d);                        /* K (Q^T z_i) */
        }
        trial_terms(b, n, T, d, Xt, Wz, G, sh, top, Ssh, shG, gap, Gtop, eg, a, a2v);
    }
    free(work);
    return 0;
}

int weighted_grad_kq(int64_t b0, int64_t b1, int64_t n, int64_t T, int64_t d, int64_t m,
                     const double *X, const double *Z, const double *G,
                     const double *sh, const int64_t *top,
                     const double *Ssh, const double *shG, const double *Gtop,
                     const double *f, const double *s_top, const double *c,
                     const double *Qz, const double *K,
                     double *gK, double *gQ)               /* out (B,d,m) each */
{
    FIX_SHAPE();
    FIX_RANK();
    if (n < 1 || d < 1 || m < 1 || d > MAXD || m > MAXD || T > 65536 || T < 2
            || n * (d + m) + T + m > MAXWORK)
        return 1;
    double *work = malloc(sizeof(double) * (size_t)(n * (d + m) + T + m));
    if (!work)
        return 3;
    double *xbar = work, *ktx = xbar + n * d, *q = ktx + n * m, *row = q + T;
    for (int64_t b = b0; b < b1; b++) {
        const double *Kb = K + b * d * m;
        trial_token_sums(b, n, T, d, X, G, sh, top, Ssh, shG, Gtop, f, s_top, c, q, xbar);
        for (int64_t i = 0; i < n; i++)                 /* K^T xbar_i */
            vecmat(d, m, Kb, xbar + i * d, ktx + i * m);
        gram(n, d, m, xbar, Qz + b * n * m, gK + b * d * m, row);   /* sum_i xbar_i (Q^T z_i)^T */
        gram(n, d, m, Z + b * n * d, ktx, gQ + b * d * m, row);      /* sum_i z_i (K^T xbar_i)^T */
    }
    free(work);
    return 0;
}
