-- Markets: one per GPU model, seeded from data/gpu-models.csv (vendor datasheets, dense BF16 TFLOPS).
-- perf_factor is the model's dense BF16 TFLOPS relative to the H100 SXM (989), used to normalise prices.
CREATE TABLE markets (
  id                text PRIMARY KEY CHECK (id ~ '^[A-Z0-9][A-Z0-9-]{1,39}$'),
  vendor            text NOT NULL,
  name              text NOT NULL,
  memory_gb         integer NOT NULL CHECK (memory_gb > 0),
  bf16_dense_tflops integer NOT NULL CHECK (bf16_dense_tflops > 0),
  mem_bw_tbps       numeric(6, 3) NOT NULL CHECK (mem_bw_tbps > 0),
  tdp_w             integer NOT NULL CHECK (tdp_w > 0),
  perf_factor       numeric(10, 6) NOT NULL CHECK (perf_factor > 0),
  -- The price tick in micro-dollars per GPU-hour (100 = 0.0001 USD).
  tick_size_micros  bigint NOT NULL DEFAULT 100 CHECK (tick_size_micros > 0),
  halted            boolean NOT NULL DEFAULT false,
  note              text NOT NULL DEFAULT '',
  created_at        timestamptz NOT NULL DEFAULT now()
);

INSERT INTO markets (id, vendor, name, memory_gb, bf16_dense_tflops, mem_bw_tbps, tdp_w, note, perf_factor)
SELECT id, vendor, name, memory_gb, tflops, bw, tdp, note, round(tflops / 989.0, 6)
FROM (VALUES
  ('H100-SXM-80G', 'NVIDIA', 'H100 SXM5 80GB', 80, 989, 3.35, 700, 'reference unit: perf factor 1.0'),
  ('H100-PCIE-80G', 'NVIDIA', 'H100 PCIe 80GB', 80, 756, 2.0, 350, ''),
  ('H800-SXM-80G', 'NVIDIA', 'H800 SXM5 80GB', 80, 989, 3.35, 700, 'same compute as H100 SXM; NVLink 400 GB/s instead of 900'),
  ('H200-SXM-141G', 'NVIDIA', 'H200 SXM 141GB', 141, 989, 4.8, 700, ''),
  ('H200-NVL-141G', 'NVIDIA', 'H200 NVL 141GB', 141, 835, 4.8, 600, 'PCIe card with NVLink bridges'),
  ('H20-96G', 'NVIDIA', 'HGX H20 96GB', 96, 148, 4.0, 400, ''),
  ('B200-180G', 'NVIDIA', 'B200 180GB', 180, 2250, 8.0, 1000, ''),
  ('A100-SXM-80G', 'NVIDIA', 'A100 SXM4 80GB', 80, 312, 2.04, 400, ''),
  ('A100-PCIE-40G', 'NVIDIA', 'A100 PCIe 40GB', 40, 312, 1.555, 250, ''),
  ('A100-PCIE-80G', 'NVIDIA', 'A100 PCIe 80GB', 80, 312, 1.935, 300, ''),
  ('L40S-48G', 'NVIDIA', 'L40S 48GB', 48, 362, 0.864, 350, ''),
  ('RTX4090-24G', 'NVIDIA', 'GeForce RTX 4090 24GB', 24, 165, 1.008, 450, 'BF16 dense with FP32 accumulate'),
  ('V100-SXM2-32G', 'NVIDIA', 'Tesla V100 32GB', 32, 125, 0.9, 300, 'FP16 tensor cores (no BF16): its normalized price is not comparable with BF16 cards'),
  ('V100-16G', 'NVIDIA', 'Tesla V100 16GB', 16, 125, 0.9, 300, 'FP16 tensor cores (no BF16): its normalized price is not comparable with BF16 cards'),
  ('ASCEND-910B', 'Huawei', 'Ascend 910B 64GB', 64, 320, 1.6, 400, 'FP16 datasheet figure (not comparable with BF16 cards); bandwidth approximate; vendor claims of BF16 parity with H100 vary widely')
) AS m (id, vendor, name, memory_gb, tflops, bw, tdp, note);
