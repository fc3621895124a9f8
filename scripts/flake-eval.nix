# Evaluates flake.nix's outputs against a stand-in nixpkgs, where no network can fetch the
# pinned one: checks that every package is declared, builds with the Makefile, and installs
# the binaries it names. `nix-instantiate --eval --strict scripts/flake-eval.nix`.
let
  flake = import ../flake.nix;
  lib = {
    genAttrs = names: f: builtins.listToAttrs (map (n: { name = n; value = f n; }) names);
    removePrefix = p: s: builtins.substring (builtins.stringLength p) (-1) s;
  };
  pkgs = system: {
    inherit system;
    stdenv.mkDerivation = a: a // { type = "derivation"; };
    mkShell = a: a // { type = "shell"; };
    pkg-config = "pkg-config"; libarchive = "libarchive"; zstd = "zstd"; jansson = "jansson";
    xxHash = "xxHash"; gnumake = "make"; clang = "clang"; criterion = "criterion"; jq = "jq";
    python3 = "python3";
  };
  nixpkgs = { inherit lib; legacyPackages = lib.genAttrs [ "x86_64-linux" "aarch64-linux" ] pkgs; };
  self = flake.outputs { inherit self nixpkgs; } // { outPath = ./..; };
  p = self.packages.x86_64-linux;
  want = [ "rad-convert" "rad-info" "rad-kbench" "rad-tune" "radiance-engine" "radiance" "default" ];
  check = n:
    assert builtins.hasAttr n p || throw "flake.nix: package '${n}' is missing";
    assert builtins.match "make .*" p.${n}.buildPhase != null || throw "flake.nix: '${n}' does not build with make";
    n;
in
{
  packages = map check want;
  radiance_bins = p.radiance.installPhase;
  shell = self.devShells.x86_64-linux.default.type;
}
