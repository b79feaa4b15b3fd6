// Hopper warpgroup MMA (wgmma, sm_90a only): m64n128k16 / m64n64k16 with fp32 accumulators, as
// asm statements on a float array of accumulators (shared by every package's kernels:
// #include "pygpukit/wgmma.cuh").
//   *_SS: A and B from shared memory descriptors (S = Q K^T: both K-major, no transpose).
//   *_RS: A from registers, B from a descriptor, B transposed (O += P V, V is MN-major).
#pragma once

#define PGK_WGMMA_OUTS64(d)                                                                        \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),            \
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),    \
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), \
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), \
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), \
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), \
        "+f"(d[63])

#define PGK_WGMMA_OUTS32(d)                                                                        \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),            \
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),    \
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])

// scale_d "1": D += A B; "0": D = A B (the accumulators' old values are ignored, so they need
// no zeroing first).
#define PGK_WGMMA_SS_(d, da, db, type, scale_d)                                                    \
    asm volatile(                                                                                  \
        "{\n"                                                                                      \
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." type "." type                               \
        " "                                                                                        \
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%" \
        "24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%" \
        "46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "                \
        "%64, %65, " scale_d ", 1, 1, 0, 0;\n}\n"                                                  \
        : PGK_WGMMA_OUTS64(d)                                                                      \
        : "l"(da), "l"(db))
#define PGK_WGMMA_SS_BF16(d, da, db) PGK_WGMMA_SS_(d, da, db, "bf16", "1")
#define PGK_WGMMA_SS_F16(d, da, db) PGK_WGMMA_SS_(d, da, db, "f16", "1")
#define PGK_WGMMA_SS_BF16_ZERO(d, da, db) PGK_WGMMA_SS_(d, da, db, "bf16", "0")
#define PGK_WGMMA_SS_F16_ZERO(d, da, db) PGK_WGMMA_SS_(d, da, db, "f16", "0")
#define PGK_WGMMA_RS_BF16(d, a, db)                                                                \
    asm volatile(                                                                                  \
        "{\n"                                                                                      \
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "                                   \
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%" \
        "24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%" \
        "46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "                \
        "{%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n}\n"                                              \
        : PGK_WGMMA_OUTS64(d)                                                                      \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db))
#define PGK_WGMMA_RS_F16(d, a, db)                                                                 \
    asm volatile(                                                                                  \
        "{\n"                                                                                      \
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "                                     \
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%" \
        "24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%" \
        "46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "                \
        "{%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n}\n"                                              \
        : PGK_WGMMA_OUTS64(d)                                                                      \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db))

// O += P V for head dim 64: n = 64.
#define PGK_WGMMA_RS64_BF16(d, a, db)                                                              \
    asm volatile(                                                                                  \
        "{\n"                                                                                      \
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "                                    \
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%" \
        "24,%25,%26,%27,%28,%29,%30,%31}, "                                                        \
        "{%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n}\n"                                              \
        : PGK_WGMMA_OUTS32(d)                                                                      \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db))
#define PGK_WGMMA_RS64_F16(d, a, db)                                                               \
    asm volatile(                                                                                  \
        "{\n"                                                                                      \
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "                                      \
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%" \
        "24,%25,%26,%27,%28,%29,%30,%31}, "                                                        \
        "{%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n}\n"                                              \
        : PGK_WGMMA_OUTS32(d)                                                                      \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db))
