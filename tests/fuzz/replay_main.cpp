// main() for a fuzz harness built without libFuzzer (any compiler): runs LLVMFuzzerTestOneInput
// once on every file named, or on every file inside the folders named. ctest uses it to replay
// the seed corpora and the inputs that once crashed (tests/fuzz/regressions) in every build.
// Leaves out: mutation (that is libFuzzer's job: LOOM_FUZZ=ON, scripts/fuzz.sh).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  int n = 0;
  for (int i = 1; i < argc; ++i) {
    std::vector<fs::path> files;
    if (fs::is_directory(argv[i])) {
      for (const auto& e : fs::recursive_directory_iterator(argv[i]))
        if (e.is_regular_file()) files.push_back(e.path());
    } else {
      files.push_back(argv[i]);
    }
    for (const auto& p : files) {
      std::ifstream in(p, std::ios::binary);
      if (!in) {
        std::fprintf(stderr, "replay: cannot read %s\n", p.c_str());
        return 1;
      }
      std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      ++n;
    }
  }
  std::printf("replayed %d inputs\n", n);
  return n > 0 ? 0 : 1;
}
