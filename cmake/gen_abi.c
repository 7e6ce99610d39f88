/* Build-time generator of the device side of the kernel ABI: prints templates' kargs.cuh (struct
 * nj_kargs, its size and offset checks, the operand numbers) from the host definitions in
 * src/kernel_abi.h and src/problem.h. Run by CMake before the templates are embedded; offsets and the
 * size are the host compiler's, which is the layout the device must match (LP64 on both sides).
 * usage: gen_abi OUT */
#include "kernel_abi.h"
#include "problem.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

typedef struct abi_field {
    char shape; /* 'P' pointer, 'S' scalar, 'A' array */
    const char *dtype, *name, *comment;
    long count;
    size_t offset;
    int check;
} abi_field;

#define ABI_ROW(shape, htype, dtype, name, count, check, comment) \
    {#shape[0], #dtype, #name, comment, (long)(count), offsetof(nj_kargs, name), check},
static const abi_field abi_fields[] = {NJ_KARGS_FIELDS(ABI_ROW)};
#undef ABI_ROW

#define ABI_OPD(name) {"NJ_OPD_" #name, NJ_OPD_##name},
static const struct {
    const char *name;
    int value;
} abi_operands[] = {NJ_OPERAND_LIST(ABI_OPD)};
#undef ABI_OPD

static void print_struct(FILE *f)
{
    size_t n = sizeof abi_fields / sizeof abi_fields[0];
    fprintf(f, "struct nj_kargs {\n");
    for (size_t i = 0; i < n; i++) {
        const abi_field *a = &abi_fields[i];
        fprintf(f, "    %s %s%s", a->dtype, a->shape == 'P' ? "*" : "", a->name);
        /* a run of pointers to one type is one declaration */
        while (a->shape == 'P' && i + 1 < n && abi_fields[i + 1].shape == 'P' &&
               strcmp(abi_fields[i + 1].dtype, a->dtype) == 0 && !a->comment)
            fprintf(f, ", *%s", abi_fields[++i].name);
        a = &abi_fields[i];
        if (a->shape == 'A') fprintf(f, "[%ld]", a->count);
        fprintf(f, ";");
        if (a->comment) fprintf(f, " /* %s */", a->comment);
        fprintf(f, "\n");
    }
    fprintf(f, "};\n");
    fprintf(f, "static_assert(sizeof(nj_kargs) == %zu, \"nj_kargs differs from src/kernel_abi.h\");\n",
            sizeof(nj_kargs));
    fprintf(f, "/* NVRTC has no offsetof; the host compiler (emulator) and nvcc check the offsets */\n");
    fprintf(f, "#ifndef __CUDACC_RTC__\n");
    for (size_t i = 0; i < n; i++)
        if (abi_fields[i].check)
            fprintf(f, "static_assert(__builtin_offsetof(nj_kargs, %s) == %zu, \"nj_kargs.%s offset\");\n",
                    abi_fields[i].name, abi_fields[i].offset, abi_fields[i].name);
    fprintf(f, "#endif\n");
}

static void print_operands(FILE *f)
{
    fprintf(f, "\n/* Operand numbers, as in src/problem.h (nj_operand): index A.bstride with them. */\n");
    for (size_t i = 0; i < sizeof abi_operands / sizeof abi_operands[0]; i++)
        fprintf(f, "#define %s %d\n", abi_operands[i].name, abi_operands[i].value);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gen_abi OUT\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "w");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    print_struct(f);
    print_operands(f);
    if (fclose(f) != 0) {
        perror(argv[1]);
        return 1;
    }
    return 0;
}
