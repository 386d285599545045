# The two commands a newcomer needs (see README.md):
#   make run    install what is missing, build, run the default scenario
#   make test   install what is missing, build, run every test through ctest
# Also: make install [PREFIX=/usr/local] (the executable; its presets and data under share/npusim;
# the manual page and bash completion; the kernel API for out-of-tree kernels, with pkg-config's
# npusim-kernel.pc: docs/KERNELS.md), make test-sanitize (the suite under ASan + UBSan),
# make fuzz [FUZZ_SECONDS=60] (the libFuzzer targets of tests/fuzz/, clang), make coverage (line coverage
# of the suite per source folder, gcov), make golden (rewrite the golden
# figures beside every scenario from what the code computes now: review the diff), make build,
# make clean.

BUILD ?= build
BUILD_SAN ?= build-sanitize
BUILD_FUZZ ?= build-fuzz
BUILD_COV ?= build-coverage
FUZZ_SECONDS ?= 60
JOBS ?= 2
CMAKE_FLAGS ?=

PREFIX ?= /usr/local

.PHONY: all deps build run test test-sanitize golden bench clean install fuzz coverage

all: build

deps:
	@scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

run: build
	$(BUILD)/cli/npusim run scenarios/default.cfg

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS)

test-sanitize: deps
	@cmake -S . -B $(BUILD_SAN) -DCMAKE_BUILD_TYPE=Debug -DNPUSIM_SANITIZE=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD_SAN) -j$(JOBS)
	ctest --test-dir $(BUILD_SAN) --output-on-failure -j$(JOBS)

golden: build
	NPUSIM_GOLDEN_UPDATE=1 ctest --test-dir $(BUILD) -R '^(cli|sweep)$$' -j$(JOBS)
	@git status --short -- scenarios

# Line coverage of the suite per source folder (gcov; scripts/coverage.sh): the folders and files
# below 85% named.
coverage: deps
	@JOBS=$(JOBS) scripts/coverage.sh $(BUILD_COV) 85

# The libFuzzer targets (tests/fuzz/), FUZZ_SECONDS each; needs clang.
fuzz: deps
	@command -v clang >/dev/null || { echo "fuzz: needs clang (libFuzzer)"; exit 1; }
	@CC=clang CXX=clang++ cmake -S . -B $(BUILD_FUZZ) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNPUSIM_FUZZ=ON -DNPUSIM_WERROR=OFF >/dev/null
	@cmake --build $(BUILD_FUZZ) -j$(JOBS) --target npusim fuzz_units fuzz_set fuzz_scenario fuzz_csv fuzz_nccl fuzz_kineto
	@scripts/fuzz.sh $(BUILD_FUZZ) $(FUZZ_SECONDS)

bench: build
	@for b in $(BUILD)/bench/*/bench_*; do echo "== $$b"; $$b || exit 1; done

clean:
	rm -rf $(BUILD) $(BUILD_SAN) $(BUILD_FUZZ) $(BUILD_COV)
