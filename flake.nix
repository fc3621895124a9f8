{
  description = "Radiance: an LLM inference engine and its toolchain (C11, CUDA C kernels)";

  # Pinned to one nixpkgs commit (nixos-24.05, May 2024); flake.lock holds its hash.
  inputs.nixpkgs.url = "github:NixOS/nixpkgs/57d6973abba7ea108bac64ae7629e7431e0199b6";

  outputs = { self, nixpkgs }:
    let
      systems = [ "x86_64-linux" "aarch64-linux" ];
      forAll = f: nixpkgs.lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});
      tools = [ "radiance" "rad-convert" "rad-info" "rad-kbench" "rad-tune" ];

      # Every package runs the same Makefile as a plain `make`; one per tool, and `radiance`
      # with everything.
      build = pkgs: { pname, targets, bins }: pkgs.stdenv.mkDerivation {
        inherit pname;
        version = "0.1.0";
        src = self;
        nativeBuildInputs = [ pkgs.pkg-config ];
        buildInputs = with pkgs; [ libarchive zstd jansson xxHash ];
        buildPhase = "make -j$NIX_BUILD_CORES ${targets}";
        installPhase = ''
          mkdir -p $out/bin $out/include/radiance/abi
          for b in ${bins}; do install -m 755 build/$b $out/bin/; done
          install -m 644 abi/*.h $out/include/radiance/abi/
        '';
      };
    in
    {
      packages = forAll (pkgs:
        let
          one = name: build pkgs { pname = name; targets = "build/${name}"; bins = name; };
        in
        {
          rad-convert = one "rad-convert";
          rad-info = one "rad-info";
          rad-kbench = one "rad-kbench";
          rad-tune = one "rad-tune";
          radiance-engine = one "radiance"; # the engine/server binary alone
          # `radiance`: the whole suite (the engine binary and every tool).
          radiance = build pkgs {
            pname = "radiance";
            targets = "tools";
            bins = builtins.concatStringsSep " " tools;
          };
          default = self.packages.${pkgs.system}.radiance;
        });

      devShells = forAll (pkgs: {
        default = pkgs.mkShell {
          packages = with pkgs; [ gnumake pkg-config clang libarchive zstd jansson xxHash criterion jq python3 ];
        };
      });
    };
}
