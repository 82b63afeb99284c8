/* The margin-model step of attnsvm, compiled: the two passes over the tokens of
 * attnsvm.models.AttentionClassifier.grad for a bilinear score a_it = x_it^T W z_i and a fixed
 * linear head (token values g_it = v^T x_it given), float64, row-major contiguous arrays.
 *
 * It computes exactly the quantities of attnsvm.models.attention.softmax_jacobian, in the same
 * order of operations where it matters (top token = first largest score; a_(2) = largest of
 * the others; s^_t = exp(a_t - a_(2)), 0 at the top), and leaves the per-sequence log-space
 * scalars (log1p, the loss) to the caller. The exponential is a branch-free Cody-Waite
 * reduction with a degree-13 polynomial, within 2 ulp of libm on [-745, 0] (the only range
 * used: every argument is a_t - a_(2) <= 0), so that the loops over tokens vectorize.
 *
 * Pass 1, jacobian_terms: for every trial b and sequence i
 *     Wz = W_b z_bi, a_t = x_bit^T Wz, top, a_(2), sh_t, Ssh = sum sh, shG = sum sh g,
 *     gap = a_(2) - a_top, g_top.
 * Pass 2, weighted_grad: given the coefficient c_bi and f_bi, s_top_bi (computed by the caller)
 *     q_t = c sh_t (g_t - f) (t != top),  q_top = c s_top (g_top Ssh - shG),
 *     xbar = sum_t q_t x_bit,  G_W[b] = sum_i xbar z_bi^T.
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
#include <string.h>

#define MAXD 256          /* W^T (d x d) and the scores live on the stack */

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
    /* exp(x) for x <= 0 (x = -inf gives 0; x < -745.2 gives 0), branch-free. */
    const double log2e = 1.4426950408889634074;
    const double ln2_hi = 6.93147180369123816490e-01;
    const double ln2_lo = 1.90821492927058770002e-10;
    double xc = x < -745.2 ? -745.2 : x;               /* keeps n and the scaling finite */
    double n = nearbyint(xc * log2e);
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
    return x < -745.2 ? 0.0 : e;
}

/* The scores a_t = x_t^T Wz of one sequence (tokens transposed: xt is d x T), its top token
 * (first largest), a_(2) and the rescaled probabilities s (0 at the top); returns the top. */
static inline int64_t top_two(int64_t T, int64_t d, const double *xt, const double *Wz,
                              double *a, double *s)
{
    for (int64_t t = 0; t < T; t++)
        a[t] = 0.0;
    for (int64_t k = 0; k < d; k++) {
        double wk = Wz[k];
        for (int64_t t = 0; t < T; t++)
            a[t] += xt[k * T + t] * wk;
    }
    int64_t tp = 0;
    double at = a[0];
    for (int64_t t = 1; t < T; t++)
        if (a[t] > at) { at = a[t]; tp = t; }
    double a2 = -INFINITY;
    for (int64_t t = 0; t < T; t++)
        if (t != tp && a[t] > a2) a2 = a[t];
    for (int64_t t = 0; t < T; t++)
        s[t] = exp_nonpos(a[t] - a2);
    s[tp] = 0.0;
    a[0] = at;                       /* hand back a_top and a_(2) in a[0], a[1] */
    a[1] = a2;
    return tp;
}

static inline void finish(int64_t bi, int64_t tp, int64_t T, const double *a, const double *s,
                          const double *g, int64_t *top, double *Ssh, double *shG, double *gap,
                          double *Gtop)
{
    double S = 0.0, SG = 0.0;
    for (int64_t t = 0; t < T; t++) {
        S += s[t];
        SG += s[t] * g[t];
    }
    top[bi] = tp;
    Ssh[bi] = S;
    shG[bi] = SG;
    gap[bi] = a[1] - a[0];
    Gtop[bi] = g[tp];
}

/* xbar = X^T q for one sequence, q from the terms of pass 1 and the coefficient c */
static inline void token_sum(int64_t bi, int64_t T, int64_t d, const double *x, const double *g,
                             const double *s, const int64_t *top, const double *Ssh,
                             const double *shG, const double *Gtop, const double *f,
                             const double *s_top, const double *c, double *q, double *xbar)
{
    double ci = c[bi], fi = f[bi];
    for (int64_t t = 0; t < T; t++)
        q[t] = (s[t] * (g[t] - fi)) * ci;
    q[top[bi]] = (s_top[bi] * (Gtop[bi] * Ssh[bi] - shG[bi])) * ci;
    for (int64_t k = 0; k < d; k++)
        xbar[k] = 0.0;
    for (int64_t t = 0; t < T; t++) {
        double qt = q[t];
        for (int64_t k = 0; k < d; k++)
            xbar[k] += x[t * d + k] * qt;
    }
}

int jacobian_terms(int64_t b0, int64_t b1, int64_t n, int64_t T, int64_t d,
                   const double *Xt,      /* (B,n,d,T): the tokens transposed */
                   const double *Z,       /* (B,n,d) */
                   const double *W,       /* (B,d,d) */
                   const double *G,       /* (B,n,T) token values */
                   double *sh,            /* out (B,n,T) */
                   int64_t *top,          /* out (B,n) */
                   double *Ssh, double *shG, double *gap, double *Gtop)   /* out (B,n) */
{
    FIX_SHAPE();
    if (d > MAXD || T > 65536 || T < 2)
        return 1;
    double Wt[d * d], Wz[d], a[T];
    for (int64_t b = b0; b < b1; b++) {
        const double *Wb = W + b * d * d;
        for (int64_t j = 0; j < d; j++)
            for (int64_t k = 0; k < d; k++)
                Wt[j * d + k] = Wb[k * d + j];
        for (int64_t i = 0; i < n; i++) {
            int64_t bi = b * n + i;
            const double *z = Z + bi * d;
            const double *xt = Xt + bi * d * T;
            const double *g = G + bi * T;
            double *s = sh + bi * T;
            for (int64_t k = 0; k < d; k++)
                Wz[k] = 0.0;
            for (int64_t j = 0; j < d; j++) {
                double zj = z[j];
                for (int64_t k = 0; k < d; k++)
                    Wz[k] += Wt[j * d + k] * zj;
            }
            int64_t tp = top_two(T, d, xt, Wz, a, s);
            finish(bi, tp, T, a, s, g, top, Ssh, shG, gap, Gtop);
        }
    }
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
    if (d > MAXD || T > 65536)
        return 1;
    double xbar[d], q[T];
    for (int64_t b = b0; b < b1; b++) {
        double *gb = gW + b * d * d;
        memset(gb, 0, sizeof(double) * d * d);
        for (int64_t i = 0; i < n; i++) {
            int64_t bi = b * n + i;
            const double *x = X + bi * T * d;
            const double *z = Z + bi * d;
            const double *g = G + bi * T;
            const double *s = sh + bi * T;
            token_sum(bi, T, d, x, g, s, top, Ssh, shG, Gtop, f, s_top, c, q, xbar);
            for (int64_t j = 0; j < d; j++) {
                double xj = xbar[j];
                for (int64_t k = 0; k < d; k++)
                    gb[j * d + k] += xj * z[k];
            }
        }
    }
    return 0;
}

int jacobian_terms_kq(int64_t b0, int64_t b1, int64_t n, int64_t T, int64_t d, int64_t m,
                      const double *Xt, const double *Z,
                      const double *K, const double *Q,    /* (B,d,m) each */
                      const double *G, double *sh, int64_t *top,
                      double *Ssh, double *shG, double *gap, double *Gtop,
                      double *Qz)                          /* out (B,n,m): Q^T z_i */
{
    FIX_SHAPE();
    FIX_RANK();
    if (d > MAXD || m > MAXD || T > 65536 || T < 2)
        return 1;
    double Kt[m * d], Wz[d], a[T];
    for (int64_t b = b0; b < b1; b++) {
        const double *Kb = K + b * d * m, *Qb = Q + b * d * m;
        for (int64_t k = 0; k < d; k++)
            for (int64_t r = 0; r < m; r++)
                Kt[r * d + k] = Kb[k * m + r];
        for (int64_t i = 0; i < n; i++) {
            int64_t bi = b * n + i;
            const double *z = Z + bi * d;
            double *qz = Qz + bi * m;
            for (int64_t r = 0; r < m; r++)
                qz[r] = 0.0;
            for (int64_t j = 0; j < d; j++) {
                double zj = z[j];
                for (int64_t r = 0; r < m; r++)
                    qz[r] += Qb[j * m + r] * zj;
            }
            for (int64_t k = 0; k < d; k++)
                Wz[k] = 0.0;
            for (int64_t r = 0; r < m; r++) {
                double qr = qz[r];
                for (int64_t k = 0; k < d; k++)
                    Wz[k] += Kt[r * d + k] * qr;
            }
            const double *g = G + bi * T;
            double *s = sh + bi * T;
            int64_t tp = top_two(T, d, Xt + bi * d * T, Wz, a, s);
            finish(bi, tp, T, a, s, g, top, Ssh, shG, gap, Gtop);
        }
    }
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
    if (d > MAXD || m > MAXD || T > 65536)
        return 1;
    double xbar[d], q[T], ktx[m];
    for (int64_t b = b0; b < b1; b++) {
        const double *Kb = K + b * d * m;
        double *gKb = gK + b * d * m, *gQb = gQ + b * d * m;
        memset(gKb, 0, sizeof(double) * d * m);
        memset(gQb, 0, sizeof(double) * d * m);
        for (int64_t i = 0; i < n; i++) {
            int64_t bi = b * n + i;
            const double *z = Z + bi * d, *qz = Qz + bi * m;
            token_sum(bi, T, d, X + bi * T * d, G + bi * T, sh + bi * T, top, Ssh, shG, Gtop,
                      f, s_top, c, q, xbar);
            for (int64_t r = 0; r < m; r++)
                ktx[r] = 0.0;
            for (int64_t k = 0; k < d; k++) {
                double xk = xbar[k];
                for (int64_t r = 0; r < m; r++) {
                    gKb[k * m + r] += xk * qz[r];      /* xbar (Q^T z)^T */
                    ktx[r] += Kb[k * m + r] * xk;      /* K^T xbar */
                }
            }
            for (int64_t j = 0; j < d; j++) {
                double zj = z[j];
                for (int64_t r = 0; r < m; r++)
                    gQb[j * m + r] += zj * ktx[r];     /* z (K^T xbar)^T */
            }
        }
    }
    return 0;
}
