// dtype.h - the weight types: one row per type in one table (DTYPES), and the sizes it gives.
//
// A type says how a matrix's numbers are stored (model.h has the bytes of each), how many bytes that
// takes, what its products multiply it with, and whether the kernels read it as stored or the loader
// first copies it into another layout. Every size (dtype.c; kernels_internal.h's row_bytes and its
// kin) is computed from the table, and every switch on a type lists all of them: the build passes
// -Wswitch-enum, so a new type is a new row here and a compile error at each switch that must learn
// it, never a silent fall into another type's kernel.
// What this is not: the KV cache's types. f32, f16 and q8_0 name the cached keys and values too
// (kernels.h, kv_type_ok), in the cache's own layout (kernels.c), which this table does not describe.
#ifndef DTYPE_H
#define DTYPE_H

#include <stddef.h>

// The numbers are the file's (model.h, header field dtype).
typedef enum {
    DTYPE_F32 = 0,
    DTYPE_F16 = 1,
    DTYPE_Q8_0 = 2,
    DTYPE_Q4_0 = 3,
    DTYPE_BF16 = 4,
    DTYPE_Q8_0_R16 = 5,
    DTYPE_BF16_R16 = 6,
    DTYPE_GGUF_Q8_0 = 7, // not in our files: a GGUF file's Q8_0 and Q4_0 (loader.c)
    DTYPE_GGUF_Q4_0 = 8,
    DTYPE_GGUF_Q4_K = 9, // not in our files either: GGUF's K-quants, read as stored (QK_K below)
    DTYPE_GGUF_Q5_K = 10,
    DTYPE_GGUF_Q6_K = 11,
    DTYPE_F32_R16 = 12, // in no file: the layouts f32 and f16 are copied into at load
    DTYPE_F16_R16 = 13,
} DType;
#define DTYPE_COUNT (DTYPE_F16_R16 + 1) // how many there are: not a type, so no switch needs a case for it
#define DTYPE_IN_OUR_FILES (DTYPE_BF16_R16 + 1) // the header's dtype is below this

#define Q8_BLOCK 32 // q8_0: values per scale (the activations' blocks too, for q8_0 and q4_0 weights)
// q4_0: values per scale, two to a byte. A q4_0 block is dotted with one q8_0 block of the
// activations, so the two sizes are one.
#define Q4_BLOCK Q8_BLOCK
#define Q4_BLOCK_BYTES (Q4_BLOCK / 2)
#define R16 16 // rows of a group in the grouped layouts (q8_0_r16, bf16_r16, f32_r16, f16_r16)
// The K-quants' super-block: values per block of q4_K, q5_K, q6_K (ggml's QK_K), eight (q6_K: sixteen)
// sub-blocks with scales of their own. Their products read x quantized in blocks of QK_K too
// (kernels_internal.h): a block's products, its scales and mins included, are one exact integer sum.
#define QK_K 256

// What the products multiply a type's weights with; matmul makes it from x once per product.
typedef enum {
    X_FLOAT, // x as it is (float32)
    X_Q8,    // x quantized to q8_0 blocks of 32 (K-quants: of QK_K; kernels.c): each block's products are one exact integer sum
    X_BF16,  // x rounded to bf16 (kernels.h, bf16_round): each product is exact in float32
} XForm;

typedef struct {
    const char *name; // as export.py's --dtype, the banner and the messages spell it
    int block;        // a row's columns are stored padded with zeros to whole blocks of this many
    int block_bytes;  // bytes of a block's values (q8_0_r16: with its scale, which sits beside them)
    int scale_bytes;  // bytes of a block's scale where the scales follow all the values (q8_0, q4_0); else 0
    int group;        // rows stored interleaved in groups of this many (the last group padded with zero
                      // rows), or 1: each row as it is
    XForm x;          // what its products multiply
    DType runs_as;    // the type the kernels read: itself, or the layout the loader copies it into
} DTypeInfo;

// The kernels of the types the kernels read: decode's dot products (kernels_decode.c, their vector
// versions in kernels_x86.c) and prefill's packing and tile (kernels_prefill.c, kernels_x86.c).
//   f32_r16, f16_r16   dot_f32r16         pack_w_f32 + kernel_f32 (gemm_f32)
//   q4_0       dot_q4             pack_w_q4 + kernel_q8 (gemm_q8)
//   gguf_q4_K, gguf_q5_K, gguf_q6_K   dot_k   (none: decode's dot products, token by token)
//   q8_0_r16   dot_r16            pack_w_r16 + kernel_q8 (gemm_q8)
//   bf16_r16   dot_br16           AVX-512: kernel_br16 (gemm_bf16); else pack_w_br16 + kernel_f32 (gemm_f32)
// q8_0 and bf16 have none: they are the first layouts of q8_0_r16 and bf16_r16 (the same numbers,
// each row as it is), which the exporter no longer writes; the loader copies them into their
// grouped layouts (kernels.h, matrix_to_r16) and matmul refuses them. f32 and f16 the same: the
// files keep each row as it is (as Hugging Face and GGUF files do), and the loader copies them into
// f32_r16 and f16_r16, the same numbers in groups of 16 rows, column k of a group 16 values side by
// side, so that decode sums each row as prefill's tiles do, one chain over the columns in order
// (kernels_internal.h): a prompt's logits are its tokens' one at a time, bit for bit. So does it gguf_q8_0, GGUF's
// Q8_0 (ggml's block_q8_0: per block of 32 an f16 scale d, then the 32 int8 q; value = q * d), each
// scale made float32 on the way (exactly: every f16 is a float32); and gguf_q4_0, GGUF's Q4_0 (ggml's
// block_q4_0: an f16 d, then 16 bytes of the same nibbles as q4_0), whose scales the loader moves
// apart into q4_0 (kernels.h, matrix_q4_0_from_gguf).
// The K-quants run as the file stores them, ggml's blocks of QK_K values (ggml-common.h, block_q4_K,
// block_q5_K, block_q6_K; kernels_internal.h spells out where each value's bits are):
//   gguf_q4_K  144 bytes: f16 d, f16 dmin, 12 bytes of eight 6-bit scales sc and mins m, 128 bytes of
//              4-bit q; the value of sub-block j (32 values) is d sc_j q - dmin m_j
//   gguf_q5_K  176 bytes: as q4_K with a fifth bit of each q in 32 bytes qh (q in 0 .. 31)
//   gguf_q6_K  210 bytes: 128 bytes of the low 4 bits of q, 64 of its high 2 bits, sixteen int8
//              scales s (one per 16 values), f16 d; the value is d s (q - 32)
// Prompts go through integer tiles of their own (kernels_prefill.c, gemm_k) whose every sum is
// decode's (kernels_decode.c, dot_k_plain), bit for bit.
// clang-format off
static const DTypeInfo DTYPES[DTYPE_COUNT] = {
    //                  name        block     block bytes   scale bytes  group  x        runs as
    [DTYPE_F32]      = {"f32",      1,        4,            0,           1,     X_FLOAT, DTYPE_F32_R16},
    [DTYPE_F16]      = {"f16",      1,        2,            0,           1,     X_FLOAT, DTYPE_F16_R16},
    [DTYPE_Q8_0]     = {"q8_0",     Q8_BLOCK, Q8_BLOCK,     4,           1,     X_Q8,    DTYPE_Q8_0_R16},
    [DTYPE_Q4_0]     = {"q4_0",     Q4_BLOCK, Q4_BLOCK / 2, 2,           1,     X_Q8,    DTYPE_Q4_0},
    [DTYPE_BF16]     = {"bf16",     1,        2,            0,           1,     X_BF16,  DTYPE_BF16_R16},
    [DTYPE_Q8_0_R16] = {"q8_0_r16", Q8_BLOCK, Q8_BLOCK + 4, 0,           R16,   X_Q8,    DTYPE_Q8_0_R16},
    [DTYPE_BF16_R16] = {"bf16_r16", Q8_BLOCK, Q8_BLOCK * 2, 0,           R16,   X_BF16,  DTYPE_BF16_R16},
    [DTYPE_GGUF_Q8_0] = {"gguf_q8_0", Q8_BLOCK, Q8_BLOCK + 2, 0,          1,     X_Q8,    DTYPE_Q8_0_R16},
    [DTYPE_GGUF_Q4_0] = {"gguf_q4_0", Q4_BLOCK, Q4_BLOCK / 2 + 2, 0,      1,     X_Q8,    DTYPE_Q4_0},
    [DTYPE_GGUF_Q4_K] = {"gguf_q4_K", QK_K,     144,              0,      1,     X_Q8,    DTYPE_GGUF_Q4_K},
    [DTYPE_GGUF_Q5_K] = {"gguf_q5_K", QK_K,     176,              0,      1,     X_Q8,    DTYPE_GGUF_Q5_K},
    [DTYPE_GGUF_Q6_K] = {"gguf_q6_K", QK_K,     210,              0,      1,     X_Q8,    DTYPE_GGUF_Q6_K},
    [DTYPE_F32_R16]  = {"f32_r16",  1,        4,            0,           R16,   X_FLOAT, DTYPE_F32_R16},
    [DTYPE_F16_R16]  = {"f16_r16",  1,        2,            0,           R16,   X_FLOAT, DTYPE_F16_R16},
};
// clang-format on

// A type's name, or "unknown" for a number that is no type; and the type of a name: 0, or -1 if none.
const char *dtype_name(DType t);
int dtype_from_name(const char *name, DType *t);

// Columns of a row as stored (whole blocks).
int matrix_cols_stored(DType t, int cols);
// Bytes of a matrix's values (whole groups of rows), and of its scales where they follow the values
// (q8_0, q4_0; else 0). 0 if the size overflows size_t.
size_t matrix_data_bytes(DType t, int rows, int cols);
size_t matrix_scale_bytes(DType t, int rows, int cols);

#endif
