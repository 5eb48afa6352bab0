/* test_config.c — the JSON training config (src/train/config.c): values land in the right
 * fields, syntax errors name file:line:column, unknown keys warn by name, bad values fail naming
 * key, value and what is allowed, cross-key checks (heads dividing dim, DeepSpeed's batch-size
 * rule over the world size), command-line --set and flags, a DeepSpeed documentation-style
 * config that runs with warnings, that the printed effective config parses back to the same
 * values, and (argument 1) that docs/config.md holds the current key table.
 */
#include "check.h"
#include "train/config.h"
#include "train/trainer.h"
#include "zero/zero.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char warnings[4096];

static void capture(zero_log_level_t level, int rank, int world, const char *msg, void *user) {
    (void)rank, (void)world, (void)user;
    if (level >= ZERO_LOG_INFO) {
        strncat(warnings, msg, sizeof warnings - strlen(warnings) - 2);
        strcat(warnings, "\n");
    }
}

static void test_values(void) {
    zero_train_config_t c;
    zero__train_config_default(&c);
    const char *json = "{\n"
                       "  \"model\": {\"layers\": 3, \"heads\": 2, \"dim\": 64, \"vocab\": 300,\n"
                       "            \"seq\": 32, \"activation_checkpointing\": true},\n"
                       "  \"data\": {\"path\": \"x.txt\", \"val_fraction\": 0.2},\n"
                       "  \"train_micro_batch_size_per_gpu\": 3,\n"
                       "  \"gradient_accumulation_steps\": 2,\n"
                       "  \"gradient_clipping\": 0.5,\n"
                       "  \"optimizer\": {\"type\": \"adamw\", \"params\": {\"lr\": 0.002,\n"
                       "                \"betas\": [0.8, 0.99], \"weight_decay\": 0.0}},\n"
                       "  \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": "
                       "{\"warmup_num_steps\": 5}},\n"
                       "  \"zero_optimization\": {\"stage\": 0},\n"
                       "  \"train\": {\"steps\": 7, \"top_k\": 5}\n"
                       "}\n";
    warnings[0] = 0;
    CHECK(zero__train_config_parse(&c, json, "t.json") == ZERO_OK, "parse: %s", zero_last_error());
    CHECK(c.model.layers == 3 && c.model.heads == 2 && c.model.dim == 64 && c.model.vocab == 300 &&
              c.model.seq == 32 && c.checkpointing == 1,
          "model section");
    CHECK(!strcmp(c.data_path, "x.txt") && fabsf(c.val_fraction - 0.2f) < 1e-7f, "data section");
    CHECK(c.micro_batch == 3 && c.grad_accum == 2 && c.grad_clip == 0.5f, "DeepSpeed keys");
    CHECK(!strcmp(c.optimizer, "AdamW") && c.lr == 0.002f && c.beta[0] == 0.8f &&
              c.beta[1] == 0.99f && c.weight_decay == 0.0f,
          "optimizer (type canonicalised: '%s')", c.optimizer);
    CHECK(!strcmp(c.scheduler, "WarmupDecayLR") && c.warmup_steps == 5, "scheduler");
    CHECK(c.steps == 7 && c.top_k == 5, "train section");
    CHECK(warnings[0] == 0, "unexpected warnings: %s", warnings);
    CHECK(zero__train_config_check(&c, 1) == ZERO_OK, "check: %s", zero_last_error());

    /* print -> parse round trip */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    zero__train_config_print(&c, f);
    fclose(f);
    zero_train_config_t d;
    zero__train_config_default(&d);
    CHECK(zero__train_config_parse(&d, buf, "printed") == ZERO_OK, "printed config: %s\n%s",
          zero_last_error(), buf);
    /* every key is set in the printed file: compare values, not who set them */
    memcpy(d.key_set, c.key_set, sizeof c.key_set);
    CHECK(!memcmp(&c, &d, sizeof c), "printed config does not parse back to the same values");
    free(buf);
}

static void test_errors(void) {
    zero_train_config_t c;
    zero__train_config_default(&c);
    zero_status_t st =
        zero__train_config_parse(&c, "{\n  \"model\": {\n    \"layers\": 2,,\n", "bad.json");
    CHECK(st == ZERO_ERR_CONFIG && strstr(zero_last_error(), "bad.json:3:"),
          "syntax error position: '%s'", zero_last_error());
    warnings[0] = 0;
    st = zero__train_config_parse(&c, "{\"model\": {\"layerz\": 2}, \"fancy\": 1}", "u.json");
    CHECK(st == ZERO_OK && strstr(warnings, "model.layerz") && strstr(warnings, "fancy"),
          "unknown keys warn by name: '%s'", warnings);
    st = zero__train_config_parse(&c, "{\"model\": {\"layers\": -2}}", "v.json");
    CHECK(st == ZERO_ERR_CONFIG && strstr(zero_last_error(), "model.layers = -2") &&
              strstr(zero_last_error(), "[1, 1024]"),
          "out of range: '%s'", zero_last_error());
    st = zero__train_config_parse(&c, "{\"model\": {\"layers\": \"two\"}}", "v.json");
    CHECK(st == ZERO_ERR_CONFIG && strstr(zero_last_error(), "\"two\"") &&
              strstr(zero_last_error(), "integer"),
          "wrong type: '%s'", zero_last_error());
    st = zero__train_config_parse(&c, "{\"model\": {\"layers\": 2.5}}", "v.json");
    CHECK(st == ZERO_ERR_CONFIG && strstr(zero_last_error(), "2.5"), "fraction: '%s'",
          zero_last_error());
    st = zero__train_config_parse(&c, "{\"optimizer\": {\"type\": \"SGD\"}}", "v.json");
    CHECK(st == ZERO_ERR_CONFIG && strstr(zero_last_error(), "SGD") &&
              strstr(zero_last_error(), "AdamW"),
          "enum: '%s'", zero_last_error());
    st = zero__train_config_parse(&c, "[1, 2]", "arr.json");
    CHECK(st == ZERO_ERR_CONFIG, "top-level array");

    zero__train_config_default(&c);
    st = zero__train_config_parse(&c, "{\"model\": {\"heads\": 3, \"dim\": 64}}", "h.json");
    CHECK(st == ZERO_OK, "parse");
    st = zero__train_config_check(&c, 1);
    CHECK(st == ZERO_ERR_CONFIG && strstr(zero_last_error(), "model.heads = 3") &&
              strstr(zero_last_error(), "model.dim = 64"),
          "heads not dividing dim: '%s'", zero_last_error());
    CHECK(zero__train_config_load(&c, "/nonexistent/zero.json") == ZERO_ERR_IO &&
              strstr(zero_last_error(), "/nonexistent/zero.json"),
          "missing config file: '%s'", zero_last_error());
}

static void test_set(void) {
    zero_train_config_t c;
    zero__train_config_default(&c);
    CHECK(zero__train_config_set(&c, "model.layers", "6") == ZERO_OK && c.model.layers == 6,
          "set int");
    CHECK(zero__train_config_set(&c, "optimizer.params.betas", "0.5,0.6") == ZERO_OK &&
              c.beta[0] == 0.5f && c.beta[1] == 0.6f,
          "set pair");
    CHECK(zero__train_config_set(&c, "model.activation_checkpointing", "true") == ZERO_OK &&
              c.checkpointing == 1,
          "set bool");
    CHECK(zero__train_config_set(&c, "model.layers", "six") == ZERO_ERR_CONFIG &&
              strstr(zero_last_error(), "six"),
          "set bad int: '%s'", zero_last_error());
    CHECK(zero__train_config_set(&c, "nope", "1") == ZERO_ERR_CONFIG &&
              strstr(zero_last_error(), "nope"),
          "set unknown key");
}

/* Parse `json` into a fresh default config and check it for `world` ranks. */
static zero_status_t parse_check(zero_train_config_t *c, const char *json, int world) {
    zero__train_config_default(c);
    zero_status_t st = zero__train_config_parse(c, json, "case.json");
    return st ? st : zero__train_config_check(c, world);
}

/* Each invalid case fails with its own message: the key, the value, what is allowed. */
static void test_invalid_cases(void) {
    static const struct {
        const char *json;
        int world;
        const char *want[3]; /* substrings of the message */
    } cases[] = {
        {"{\n  \"seed\": 1,\n  \"optimizer\": {\"type\": \"AdamW\" \"params\": {}}\n}",
         1,
         {"case.json:3:", "syntax", NULL}},
        {"{\"a\": 1,\n\n     }", 1, {"case.json:3:", "JSON syntax error", NULL}},
        {"{\"train_batch_size\": 10, \"train_micro_batch_size_per_gpu\": 2, "
         "\"gradient_accumulation_steps\": 2}",
         2,
         {"train_batch_size = 10", "(2) x gradient_accumulation_steps (2) x world size (2)",
          "= 8"}},
        {"{\"train_batch_size\": 12, \"train_micro_batch_size_per_gpu\": 5}",
         1,
         {"train_batch_size = 12", "not divisible", "multiple of 5"}},
        {"{\"train_batch_size\": 6, \"gradient_accumulation_steps\": 4}",
         1,
         {"train_batch_size = 6", "gradient_accumulation_steps (4)", NULL}},
        {"{\"zero_optimization\": {\"stage\": 5}}",
         1,
         {"zero_optimization.stage = 5", "[0, 3]", NULL}},
        {"{\"optimizer\": {\"params\": {\"lr\": -0.001}}}",
         1,
         {"optimizer.params.lr = -0.001", "out of range", "[0, 10]"}},
        {"{\"scheduler\": {\"type\": \"OneCycle\"}}",
         1,
         {"scheduler.type = \"OneCycle\"", "WarmupCosineLR|WarmupDecayLR|WarmupLR", NULL}},
        {"{\"optimizer\": {\"type\": \"Lamb\"}}", 1, {"optimizer.type", "Lamb", "AdamW|Adam"}},
        {"{\"zero_optimization\": {\"stage\": \"3\"}}",
         1,
         {"zero_optimization.stage = \"3\"", "wrong type", "integer"}},
        {"{\"zero_optimization\": {\"overlap_comm\": 1}}",
         1,
         {"zero_optimization.overlap_comm = 1", "boolean", NULL}},
        {"{\"zero_optimization\": {\"zero_quantized_weights\": \"int8\"}}",
         1,
         {"zero_optimization.zero_quantized_weights = \"int8\"", "boolean", NULL}},
        {"{\"zero_optimization\": {\"zero_hpz_partition_size\": 0}}",
         1,
         {"zero_optimization.zero_hpz_partition_size = 0", NULL, NULL}},
        {"{\"zero_optimization\": {\"zero_quantized_gradients\": 4}}",
         1,
         {"zero_optimization.zero_quantized_gradients = 4", "boolean", NULL}},
        {"{\"zero_optimization\": {\"zeropp_loco_param\": {\"err_beta\": 1.5}}}",
         1,
         {"zero_optimization.zeropp_loco_param.err_beta = 1.5", "out of range", NULL}},
        {"{\"zero_optimization\": {\"zeropp_loco_param\": {\"reset_T\": 0}}}",
         1,
         {"zero_optimization.zeropp_loco_param.reset_T = 0", "out of range", NULL}},
        {"{\"zero_optimization\": {\"zeropp_loco_param\": 0.8}}",
         1,
         {"zero_optimization.zeropp_loco_param = 0.8", "expected an object", NULL}},
        {"{\"optimizer\": {\"params\": {\"betas\": [0.9]}}}",
         1,
         {"optimizer.params.betas = [0.9]", "[number, number]", NULL}},
        {"{\"gradient_clipping\": true}", 1, {"gradient_clipping = true", "number", NULL}},
        {"{\"zero_optimization\": {\"reduce_bucket_size\": -1}}",
         1,
         {"zero_optimization.reduce_bucket_size = -1", "out of range", NULL}},
        {"{\"train\": {\"backend\": \"nccl\"}}", 1, {"train.backend", "nccl", "auto|threads|mpi"}},
        {"{\"model\": 4}", 1, {"model = 4", "expected an object", NULL}},
        {"{\"optimizer\": {\"params\": [0.1]}}",
         1,
         {"optimizer.params = [0.1]", "expected an object", NULL}},
        {"{\"train_micro_batch_size_per_gpu\": 2.5}",
         1,
         {"train_micro_batch_size_per_gpu = 2.5", "integer", NULL}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        zero_train_config_t c;
        zero_status_t st = parse_check(&c, cases[i].json, cases[i].world);
        int ok = st == ZERO_ERR_CONFIG;
        for (int k = 0; k < 3 && cases[i].want[k]; k++)
            ok = ok && strstr(zero_last_error(), cases[i].want[k]) != NULL;
        CHECK(ok, "case %zu (%s): status %d, message '%s'", i, cases[i].json, (int)st,
              zero_last_error());
    }
}

/* model.moe: the defaults, a good section, and each bad value refused before training naming
 * the key and the value (zero__train_config_check, as `zero train` runs it before step 1). */
static void test_moe(void) {
    zero_train_config_t c;
    CHECK(parse_check(&c, "{}", 1) == ZERO_OK && c.model.moe.experts == 0 &&
              c.model.moe.top_k == 2 && c.model.moe.every == 2 &&
              c.model.moe.capacity_factor == 1.0 && c.model.moe.min_capacity == 4 &&
              c.model.moe.drop_tokens == 1 && c.model.moe.ep_size == 1,
          "moe defaults: %s", zero_last_error());
    CHECK(
        parse_check(&c,
                    "{\"model\": {\"moe\": {\"experts\": 8, \"top_k\": 1, \"every\": 1, "
                    "\"capacity_factor\": 1.25, \"eval_capacity_factor\": 2, \"min_capacity\": 0, "
                    "\"drop_tokens\": false, \"aux_loss_coef\": 0.02, \"z_loss_coef\": 0.001, "
                    "\"shared_experts\": 2, \"hidden\": 64, \"ep_size\": 1}}}",
                    1) == ZERO_OK &&
            c.model.moe.experts == 8 && c.model.moe.top_k == 1 && c.model.moe.every == 1 &&
            c.model.moe.capacity_factor == 1.25 && c.model.moe.eval_capacity_factor == 2.0 &&
            c.model.moe.min_capacity == 0 && c.model.moe.drop_tokens == 0 &&
            c.model.moe.aux_loss_coef == 0.02f && c.model.moe.z_loss_coef == 0.001f &&
            c.model.moe.shared_experts == 2 && c.model.moe.hidden == 64,
        "a full moe section: %s", zero_last_error());
    CHECK(zero__train_config_flag_key("--ep-size") &&
              !strcmp(zero__train_config_flag_key("--ep-size"), "model.moe.ep_size"),
          "--ep-size");
    static const struct {
        const char *moe; /* the model.moe object's members */
        zero_status_t status;
        const char *want[2];
    } cases[] = {
        {"\"experts\": -1", ZERO_ERR_CONFIG, {"model.moe.experts = -1", NULL}},
        {"\"experts\": 4, \"top_k\": 3", ZERO_ERR_CONFIG, {"model.moe.top_k = 3", NULL}},
        {"\"experts\": 1, \"top_k\": 2",
         ZERO_ERR_CONFIG,
         {"model.moe.top_k = 2", "exceeds model.moe.experts = 1"}},
        {"\"experts\": 4, \"every\": 0", ZERO_ERR_CONFIG, {"model.moe.every = 0", NULL}},
        {"\"experts\": 4, \"every\": 9",
         ZERO_ERR_CONFIG,
         {"model.moe.every = 9", "exceeds model.layers = 4"}},
        {"\"experts\": 4, \"capacity_factor\": 0",
         ZERO_ERR_CONFIG,
         {"model.moe.capacity_factor = 0", "finite number > 0"}},
        {"\"experts\": 4, \"eval_capacity_factor\": -1",
         ZERO_ERR_CONFIG,
         {"model.moe.eval_capacity_factor = -1", "finite number > 0"}},
        {"\"experts\": 4, \"min_capacity\": -3",
         ZERO_ERR_CONFIG,
         {"model.moe.min_capacity = -3", NULL}},
        {"\"experts\": 4, \"aux_loss_coef\": -0.1",
         ZERO_ERR_CONFIG,
         {"model.moe.aux_loss_coef = -0.1", NULL}},
        {"\"experts\": 4, \"z_loss_coef\": -1",
         ZERO_ERR_CONFIG,
         {"model.moe.z_loss_coef = -1", NULL}},
        {"\"experts\": 4, \"shared_experts\": -1",
         ZERO_ERR_CONFIG,
         {"model.moe.shared_experts = -1", NULL}},
        {"\"experts\": 4, \"ep_size\": 3",
         ZERO_ERR_CONFIG,
         {"model.moe.ep_size = 3", "divisor of model.moe.experts = 4"}},
        {"\"experts\": 4, \"ep_size\": 2",
         ZERO_ERR_CONFIG,
         {"model.moe.ep_size = 2", "does not divide the world size 1"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char json[256];
        snprintf(json, sizeof json, "{\"model\": {\"moe\": {%s}}}", cases[i].moe);
        zero_status_t st = parse_check(&c, json, 1);
        int ok = st == cases[i].status;
        for (int k = 0; k < 2 && cases[i].want[k]; k++)
            ok = ok && strstr(zero_last_error(), cases[i].want[k]) != NULL;
        CHECK(ok, "moe case %zu (%s): status %d, message '%s'", i, cases[i].moe, (int)st,
              zero_last_error());
    }
    /* ep_size dividing both the experts and the world */
    CHECK(parse_check(&c, "{\"model\": {\"moe\": {\"experts\": 4, \"ep_size\": 2}}}", 4) == ZERO_OK,
          "4 experts, ep_size 2 on 4 ranks: %s", zero_last_error());
}

/* DeepSpeed's rule: any two of the batch-size triple determine the third. */
static void test_batch_sizes(void) {
    zero_train_config_t c;
    CHECK(parse_check(&c, "{\"train_batch_size\": 24, \"train_micro_batch_size_per_gpu\": 4}", 3) ==
                  ZERO_OK &&
              c.grad_accum == 2 && c.micro_batch == 4,
          "tb + micro -> accumulation %d: %s", c.grad_accum, zero_last_error());
    CHECK(parse_check(&c, "{\"train_batch_size\": 24, \"gradient_accumulation_steps\": 3}", 2) ==
                  ZERO_OK &&
              c.micro_batch == 4 && c.grad_accum == 3,
          "tb + accumulation -> micro %d", c.micro_batch);
    CHECK(parse_check(&c, "{\"train_batch_size\": 8}", 2) == ZERO_OK && c.micro_batch == 4 &&
              c.grad_accum == 1,
          "tb alone -> micro %d accumulation %d", c.micro_batch, c.grad_accum);
    CHECK(parse_check(&c,
                      "{\"train_micro_batch_size_per_gpu\": 3, \"gradient_accumulation_steps\": "
                      "5}",
                      2) == ZERO_OK &&
              c.train_batch_size == 30,
          "micro + accumulation -> tb %d", c.train_batch_size);
    CHECK(parse_check(&c,
                      "{\"train_batch_size\": 30, \"train_micro_batch_size_per_gpu\": 3, "
                      "\"gradient_accumulation_steps\": 5}",
                      2) == ZERO_OK,
          "consistent triple: %s", zero_last_error());
    /* the resolved config, printed and read back for the same world, checks again */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    zero__train_config_print(&c, f);
    fclose(f);
    zero_train_config_t d;
    CHECK(parse_check(&d, buf, 2) == ZERO_OK && d.train_batch_size == 30,
          "printed config re-checks: %s", zero_last_error());
    CHECK(parse_check(&d, buf, 3) == ZERO_ERR_CONFIG && strstr(zero_last_error(), "world size (3)"),
          "printed config for another world fails: '%s'", zero_last_error());
    free(buf);
}

/* A ds_config.json in the shape of DeepSpeed's documentation examples (ZeRO-3 with fp16,
 * Adam, WarmupLR, offload): it parses, warns about what it drops, and maps the values. */
static void test_deepspeed_example(void) {
    const char *json =
        "{\n"
        "  \"train_batch_size\": 16,\n"
        "  \"gradient_accumulation_steps\": 1,\n"
        "  \"steps_per_print\": 2000,\n"
        "  \"wall_clock_breakdown\": false,\n"
        "  \"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": 0.001, \"betas\": [0.8, "
        "0.999], \"eps\": 1e-8, \"weight_decay\": 3e-7}},\n"
        "  \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": 0, "
        "\"warmup_max_lr\": 0.001, \"warmup_num_steps\": 1000, \"warmup_type\": \"log\"}},\n"
        "  \"fp16\": {\"enabled\": true, \"loss_scale\": 0, \"initial_scale_power\": 16, "
        "\"loss_scale_window\": 1000, \"hysteresis\": 2, \"min_loss_scale\": 1},\n"
        "  \"bf16\": {\"enabled\": false},\n"
        "  \"aio\": {\"block_size\": 1048576, \"queue_depth\": 8},\n"
        "  \"zero_optimization\": {\n"
        "    \"stage\": 3, \"contiguous_gradients\": true, \"overlap_comm\": true,\n"
        "    \"stage3_max_live_parameters\": 1e9, \"stage3_max_reuse_distance\": 1e9,\n"
        "    \"stage3_prefetch_bucket_size\": 1e7, \"stage3_param_persistence_threshold\": 1e5,\n"
        "    \"reduce_bucket_size\": 1e7, \"allgather_bucket_size\": 5e8, \"reduce_scatter\": "
        "true,\n"
        "    \"sub_group_size\": 1e9,\n"
        "    \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true},\n"
        "    \"offload_param\": {\"device\": \"cpu\", \"pin_memory\": true},\n"
        "    \"stage3_gather_16bit_weights_on_model_save\": true\n"
        "  },\n"
        "  \"gradient_clipping\": \"auto\",\n"
        "  \"my_custom_key\": 1\n"
        "}\n";
    warnings[0] = 0;
    zero_train_config_t c;
    zero_status_t st = parse_check(&c, json, 4);
    CHECK(st == ZERO_OK, "DeepSpeed example: %s", zero_last_error());
    const char *ignored[] = {"'zero_optimization.stage3_gather_16bit_weights_on_model_save'",
                             "gradient_clipping = \"auto\"", "unknown key 'my_custom_key'"};
    for (size_t i = 0; i < sizeof ignored / sizeof ignored[0]; i++)
        CHECK(strstr(warnings, ignored[i]) != NULL, "no warning '%s' in:\n%s", ignored[i],
              warnings);
    CHECK(!strstr(warnings, "'bf16") && !strstr(warnings, "wall_clock") &&
              !strstr(warnings, "'fp16") && !strstr(warnings, "sub_group_size") &&
              !strstr(warnings, "'aio") && !strstr(warnings, "offload_optimizer") &&
              !strstr(warnings, "offload_param"),
          "disabled (or now supported) features warn: %s", warnings);
    /* the offload and aio keys are read as DeepSpeed documents them */
    zero_engine_params_t ep = zero_engine_params_default();
    CHECK(zero__train_config_engine_params(&c, &ep) == ZERO_OK &&
              ep.offload_optimizer.device == ZERO_OFFLOAD_CPU && ep.sub_group_elems == 1000000000 &&
              ep.aio.block_size == 1048576 && ep.aio.queue_depth == 8 &&
              ep.offload_optimizer.buffer_count == 4 && ep.offload_optimizer.pipeline_read == 1 &&
              ep.offload_param.device == ZERO_OFFLOAD_CPU && ep.offload_param.buffer_count == 5,
          "offload keys: device %s, sub-group %lld, block %zu, depth %d, param device %s",
          zero_offload_device_name(ep.offload_optimizer.device), (long long)ep.sub_group_elems,
          ep.aio.block_size, ep.aio.queue_depth, zero_offload_device_name(ep.offload_param.device));
    /* device nvme without a path names the block's key */
    const char *blocks[2] = {"offload_optimizer", "offload_param"};
    for (int b = 0; b < 2; b++) {
        zero_train_config_t d = c;
        snprintf(b ? d.offload_param : d.offload_optimizer, sizeof d.offload_param, "nvme");
        (b ? d.param_nvme_path : d.nvme_path)[0] = 0;
        char want[96];
        snprintf(want, sizeof want, "zero_optimization.%s.nvme_path is not set", blocks[b]);
        ep = zero_engine_params_default();
        CHECK(zero__train_config_engine_params(&d, &ep) == ZERO_ERR_CONFIG &&
                  strstr(zero_last_error(), want),
              "%s nvme without a path: '%s'", blocks[b], zero_last_error());
    }
    CHECK(c.fp16 == 1 && c.bf16 == 0 && c.loss_scaler.loss_scale == 0.0 &&
              c.loss_scaler.initial_scale_power == 16 && c.loss_scaler.loss_scale_window == 1000 &&
              c.loss_scaler.hysteresis == 2 && c.loss_scaler.min_loss_scale == 1.0 &&
              zero__train_config_compute_dtype(&c) == ZERO_DTYPE_FP16 &&
              zero__train_config_accum_dtype(&c) == ZERO_DTYPE_FP32,
          "fp16 block: fp16 %d bf16 %d power %d", c.fp16, c.bf16,
          c.loss_scaler.initial_scale_power);
    CHECK(c.stage == 3 && c.micro_batch == 4 && c.grad_accum == 1 && c.train_batch_size == 16,
          "stage %d micro %d", c.stage, c.micro_batch);
    CHECK(c.reduce_bucket_elems == 10000000 && c.prefetch_bucket_elems == 10000000 &&
              c.persistence_threshold_elems == 100000 && c.max_live_elems == 1000000000LL,
          "zero_optimization sizes");
    CHECK(!strcmp(c.optimizer, "Adam") && c.beta[1] == 0.999f && c.weight_decay == 3e-7f,
          "optimizer");
    CHECK(!strcmp(c.scheduler, "WarmupLR") && c.warmup_max_lr == 0.001f && c.warmup_steps == 1000 &&
              !strcmp(c.warmup_type, "log"),
          "scheduler");
    CHECK(c.grad_clip == 0.0f && c.steps_per_print == 2000, "auto keeps the default clip");
}

/* Mixed precision: bf16 / fp16 blocks, the fp16.* keys through the loss scaler's setter (its
 * errors name the key and the value), data_types.grad_accum_dtype, --dtype. */
static void test_mixed_precision(void) {
    zero_train_config_t c;
    zero__train_config_default(&c);
    zero_loss_scaler_params_t lsd = zero_loss_scaler_params_default();
    CHECK(c.loss_scaler.loss_scale == lsd.loss_scale &&
              c.loss_scaler.initial_scale_power == lsd.initial_scale_power &&
              c.loss_scaler.loss_scale_window == lsd.loss_scale_window &&
              c.loss_scaler.hysteresis == lsd.hysteresis &&
              c.loss_scaler.consecutive_hysteresis == lsd.consecutive_hysteresis &&
              c.loss_scaler.min_loss_scale == lsd.min_loss_scale &&
              c.loss_scaler.raise_error_at_min_scale == lsd.raise_error_at_min_scale,
          "the config's fp16.* defaults differ from the loss scaler's");
    warnings[0] = 0;
    CHECK(parse_check(&c,
                      "{\"bf16\": {\"enabled\": true}, \"data_types\": {\"grad_accum_dtype\": "
                      "\"bf16\"}}",
                      1) == ZERO_OK &&
              zero__train_config_compute_dtype(&c) == ZERO_DTYPE_BF16 &&
              zero__train_config_accum_dtype(&c) == ZERO_DTYPE_BF16 && !warnings[0],
          "bf16 + bf16 accumulation: %s / warnings '%s'", zero_last_error(), warnings);
    zero_status_t st =
        parse_check(&c, "{\"bf16\": {\"enabled\": true}, \"fp16\": {\"enabled\": true}}", 1);
    CHECK(st == ZERO_ERR_CONFIG && strstr(zero_last_error(), "bf16.enabled") &&
              strstr(zero_last_error(), "fp16.enabled"),
          "both enabled: '%s'", zero_last_error());
    st = parse_check(&c, "{\"fp16\": {\"enabled\": true, \"hysteresis\": 0}}", 1);
    CHECK(st == ZERO_ERR_CONFIG && strstr(zero_last_error(), "hysteresis") &&
              strstr(zero_last_error(), "0"),
          "hysteresis 0: '%s'", zero_last_error());
    st = parse_check(&c, "{\"fp16\": {\"enabled\": true, \"initial_scale_power\": 200}}", 1);
    CHECK(st == ZERO_ERR_CONFIG && strstr(zero_last_error(), "initial_scale_power") &&
              strstr(zero_last_error(), "200"),
          "initial_scale_power 200: '%s'", zero_last_error());
    st = parse_check(&c,
                     "{\"fp16\": {\"enabled\": true, \"loss_scale\": 128, "
                     "\"raise_error_at_min_scale\": false}}",
                     1);
    CHECK(st == ZERO_OK && c.loss_scaler.loss_scale == 128.0 &&
              c.loss_scaler.raise_error_at_min_scale == 0,
          "static scale 128: '%s'", zero_last_error());
    st = parse_check(&c,
                     "{\"bf16\": {\"enabled\": true}, \"data_types\": "
                     "{\"grad_accum_dtype\": \"fp16\"}}",
                     1);
    CHECK(st == ZERO_ERR_CONFIG && strstr(zero_last_error(), "grad_accum_dtype") &&
              strstr(zero_last_error(), "fp16") && strstr(zero_last_error(), "bf16"),
          "bf16 with fp16 accumulation: '%s'", zero_last_error());
    st = parse_check(&c, "{\"data_types\": {\"grad_accum_dtype\": \"fp8\"}}", 1);
    CHECK(st == ZERO_ERR_CONFIG && strstr(zero_last_error(), "fp8"), "fp8: '%s'",
          zero_last_error());
    /* --dtype overrides the file's blocks. */
    CHECK(parse_check(&c, "{\"fp16\": {\"enabled\": true}}", 1) == ZERO_OK &&
              zero__train_config_set_dtype(&c, "bf16") == ZERO_OK &&
              zero__train_config_check(&c, 1) == ZERO_OK &&
              zero__train_config_compute_dtype(&c) == ZERO_DTYPE_BF16,
          "--dtype bf16 over fp16.enabled: %s", zero_last_error());
    CHECK(zero__train_config_set_dtype(&c, "fp32") == ZERO_OK &&
              zero__train_config_compute_dtype(&c) == ZERO_DTYPE_FP32,
          "--dtype fp32");
    CHECK(zero__train_config_set_dtype(&c, "int8") == ZERO_ERR_CONFIG &&
              strstr(zero_last_error(), "--dtype int8"),
          "--dtype int8: '%s'", zero_last_error());
    /* The printed config names every key and reads back the same. */
    zero_train_config_t d;
    zero__train_config_default(&d);
    zero__train_config_set(&d, "fp16.enabled", "true");
    zero__train_config_set(&d, "fp16.loss_scale_window", "500");
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    zero__train_config_print(&d, m);
    fclose(m);
    CHECK(strstr(buf, "\"loss_scale_window\": 500") &&
              strstr(buf, "\"grad_accum_dtype\": \"fp32\""),
          "printed config: %s", buf);
    zero_train_config_t e;
    zero__train_config_default(&e);
    CHECK(zero__train_config_parse(&e, buf, "printed") == ZERO_OK && e.fp16 == 1 &&
              e.loss_scaler.loss_scale_window == 500,
          "printed config reads back: %s", zero_last_error());
    free(buf);
}

/* 8-bit Adam states: optimizer.params.state_dtype and optimizer.type AdamW8bit, into the
 * engine's parameters; bad values and combinations fail naming the keys and values. */
static void test_state_dtype(void) {
    zero_train_config_t c;
    zero_engine_params_t ep;
    CHECK(parse_check(&c, "{}", 1) == ZERO_OK &&
              zero__train_config_engine_params(&c, &ep) == ZERO_OK &&
              ep.optim_state_dtype == ZERO_DTYPE_FP32,
          "default state dtype: %s", zero_last_error());
    CHECK(parse_check(&c, "{\"optimizer\": {\"type\": \"adamw8bit\"}}", 1) == ZERO_OK &&
              zero__train_config_engine_params(&c, &ep) == ZERO_OK &&
              ep.optim_state_dtype == ZERO_DTYPE_INT8 && !strcmp(c.optimizer, "AdamW8bit"),
          "AdamW8bit: %s", zero_last_error());
    CHECK(parse_check(&c,
                      "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"state_dtype\": "
                      "\"int8\"}}}",
                      1) == ZERO_OK &&
              zero__train_config_engine_params(&c, &ep) == ZERO_OK &&
              ep.optim_state_dtype == ZERO_DTYPE_INT8,
          "AdamW with state_dtype int8: %s", zero_last_error());
    CHECK(parse_check(&c,
                      "{\"optimizer\": {\"type\": \"AdamW8bit\", \"params\": {\"state_dtype\": "
                      "\"int8\"}}}",
                      1) == ZERO_OK,
          "AdamW8bit with state_dtype int8: %s", zero_last_error());
    zero_status_t st =
        parse_check(&c, "{\"optimizer\": {\"params\": {\"state_dtype\": \"int7\"}}}", 1);
    CHECK(st == ZERO_ERR_CONFIG && strstr(zero_last_error(), "optimizer.params.state_dtype") &&
              strstr(zero_last_error(), "int7") && strstr(zero_last_error(), "fp32|int8"),
          "state_dtype int7: '%s'", zero_last_error());
    st = parse_check(&c,
                     "{\"optimizer\": {\"type\": \"AdamW8bit\", \"params\": {\"state_dtype\": "
                     "\"fp32\"}}}",
                     1);
    CHECK(st == ZERO_ERR_CONFIG && strstr(zero_last_error(), "AdamW8bit") &&
              strstr(zero_last_error(), "state_dtype = \"fp32\""),
          "AdamW8bit with fp32 states: '%s'", zero_last_error());
    st = parse_check(&c, "{\"optimizer\": {\"type\": \"Adam8bit\"}}", 1);
    CHECK(st == ZERO_ERR_CONFIG && strstr(zero_last_error(), "Adam8bit") &&
              strstr(zero_last_error(), "AdamW8bit"),
          "Adam8bit: '%s'", zero_last_error());
    st = parse_check(&c,
                     "{\"optimizer\": {\"type\": \"AdamW8bit\"}, \"zero_optimization\": "
                     "{\"stage\": 3, \"offload_param\": {\"device\": \"nvme\", "
                     "\"nvme_path\": \"swap\"}}}",
                     1);
    CHECK(st == ZERO_ERR_CONFIG && strstr(zero_last_error(), "offload_param.device") &&
              strstr(zero_last_error(), "AdamW8bit"),
          "AdamW8bit with offload_param nvme: '%s'", zero_last_error());
    st = parse_check(&c,
                     "{\"optimizer\": {\"params\": {\"state_dtype\": \"int8\"}}, "
                     "\"zero_optimization\": {\"offload_optimizer\": {\"device\": \"nvme\", "
                     "\"nvme_path\": \"swap\"}}}",
                     1);
    CHECK(st == ZERO_ERR_CONFIG && strstr(zero_last_error(), "offload_optimizer.device") &&
              strstr(zero_last_error(), "state_dtype = \"int8\""),
          "int8 states with offload_optimizer nvme: '%s'", zero_last_error());
    CHECK(parse_check(&c,
                      "{\"optimizer\": {\"type\": \"AdamW8bit\"}, \"zero_optimization\": "
                      "{\"offload_optimizer\": {\"device\": \"cpu\"}}}",
                      1) == ZERO_OK,
          "AdamW8bit with offload_optimizer cpu: %s", zero_last_error());
}

/* fp8: the block's keys into the model's config (off by default), and every bad value or
 * combination refused naming the key(s) and the value. */
static void test_fp8(void) {
    zero_train_config_t c;
    CHECK(parse_check(&c, "{}", 1) == ZERO_OK && !c.model.fp8.enabled, "fp8 is off by default: %s",
          zero_last_error());
    CHECK(parse_check(&c,
                      "{\"bf16\": {\"enabled\": true}, \"fp8\": {\"enabled\": true, "
                      "\"format\": \"e4m3\", \"recipe\": \"blockwise\", \"margin\": 2, "
                      "\"amax_history_len\": 16}}",
                      2) == ZERO_OK &&
              c.model.fp8.enabled && !c.model.fp8.hybrid &&
              c.model.fp8.recipe == ZERO_FP8_BLOCKWISE && c.model.fp8.margin == 2 &&
              c.model.fp8.history_len == 16,
          "fp8 e4m3 blockwise: %s", zero_last_error());
    CHECK(parse_check(&c, "{\"fp8\": {\"enabled\": true}}", 1) == ZERO_OK && c.model.fp8.hybrid &&
              c.model.fp8.recipe == ZERO_FP8_DELAYED && c.model.fp8.margin == 0 &&
              c.model.fp8.history_len == 1024,
          "fp8 defaults (Transformer Engine's: hybrid, delayed, margin 0, history 1024): %s",
          zero_last_error());
    static const struct {
        const char *json, *want[3];
    } bad[] = {
        {"{\"fp8\": {\"enabled\": true, \"format\": \"e5m2\"}}",
         {"fp8.format", "e5m2", "hybrid|e4m3"}},
        {"{\"fp8\": {\"enabled\": true, \"recipe\": \"current\"}}",
         {"fp8.recipe", "current", "delayed|blockwise"}},
        {"{\"fp8\": {\"enabled\": true, \"margin\": -1}}", {"fp8.margin", "-1", NULL}},
        {"{\"fp8\": {\"enabled\": true, \"amax_history_len\": 0}}",
         {"fp8.amax_history_len", "0", NULL}},
        {"{\"fp16\": {\"enabled\": true}, \"fp8\": {\"enabled\": true}}",
         {"fp8.enabled", "fp16.enabled", NULL}},
        {"{\"model\": {\"moe\": {\"experts\": 4}}, \"fp8\": {\"enabled\": true}}",
         {"fp8.enabled", "model.moe.experts = 4", NULL}},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        zero_status_t st = parse_check(&c, bad[i].json, 1);
        int named = st == ZERO_ERR_CONFIG;
        for (int k = 0; k < 3 && bad[i].want[k]; k++)
            named = named && strstr(zero_last_error(), bad[i].want[k]);
        CHECK(named, "%s: status %d, '%s'", bad[i].json, st, zero_last_error());
    }
}

/* 1-bit Adam: optimizer.type OneBitAdam and freeze_step into the engine's parameters, DeepSpeed's
 * ignored keys accepted, the combinations it cannot run with refused naming key and value. */
static void test_onebit(void) {
    zero_train_config_t c;
    zero_engine_params_t ep;
    CHECK(parse_check(&c, "{\"optimizer\": {\"type\": \"OneBitAdam\"}}", 1) == ZERO_OK &&
              zero__train_config_engine_params(&c, &ep) == ZERO_OK && ep.onebit == 1 &&
              ep.freeze_step == 100000,
          "OneBitAdam default freeze_step: %s", zero_last_error());
    CHECK(parse_check(&c,
                      "{\"optimizer\": {\"type\": \"OneBitAdam\", \"params\": {\"lr\": 1e-3, "
                      "\"freeze_step\": 400, \"cuda_aware\": false, \"comm_backend_name\": "
                      "\"nccl\"}}}",
                      1) == ZERO_OK &&
              zero__train_config_engine_params(&c, &ep) == ZERO_OK && ep.onebit == 1 &&
              ep.freeze_step == 400 && ep.lr == 1e-3f,
          "OneBitAdam freeze_step 400: %s", zero_last_error());
    CHECK(parse_check(&c, "{}", 1) == ZERO_OK &&
              zero__train_config_engine_params(&c, &ep) == ZERO_OK && ep.onebit == 0,
          "AdamW: no 1-bit");
    zero_status_t st = parse_check(
        &c, "{\"optimizer\": {\"type\": \"OneBitAdam\", \"params\": {\"freeze_step\": -1}}}", 1);
    CHECK(st == ZERO_ERR_CONFIG && strstr(zero_last_error(), "optimizer.params.freeze_step"),
          "freeze_step -1: '%s'", zero_last_error());
    static const char *bad[][2] = {
        {"\"zero_optimization\": {\"stage\": 1}", "zero_optimization.stage = 1"},
        {"\"zero_optimization\": {\"stage\": 3}", "zero_optimization.stage = 3"},
        {"\"fp16\": {\"enabled\": true}", "fp16.enabled = true"},
        {"\"zero_optimization\": {\"offload_optimizer\": {\"device\": \"cpu\"}}",
         "zero_optimization.offload_optimizer.device = cpu"},
        {"\"model\": {\"moe\": {\"experts\": 4, \"ep_size\": 2}}", "model.moe.ep_size"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char json[512];
        snprintf(json, sizeof json, "{\"optimizer\": {\"type\": \"OneBitAdam\"}, %s}", bad[i][0]);
        st = parse_check(&c, json, 2); /* 2 ranks: ep_size 2 divides them */
        CHECK(st == ZERO_ERR_CONFIG && strstr(zero_last_error(), bad[i][1]) &&
                  strstr(zero_last_error(), "OneBitAdam"),
              "OneBitAdam with %s: '%s'", bad[i][0], zero_last_error());
    }
    st = parse_check(&c,
                     "{\"optimizer\": {\"type\": \"OneBitAdam\", \"params\": {\"state_dtype\": "
                     "\"int8\"}}}",
                     1);
    CHECK(st == ZERO_ERR_CONFIG && strstr(zero_last_error(), "optimizer.params.state_dtype = int8"),
          "OneBitAdam with int8 states: '%s'", zero_last_error());
}

/* The legacy boolean form of zero_optimization in DeepSpeed's older examples. */
static void test_legacy_zero(void) {
    zero_train_config_t c;
    warnings[0] = 0;
    CHECK(parse_check(&c, "{\"train_batch_size\": 8, \"zero_optimization\": true}", 2) == ZERO_OK &&
              c.stage == 1 && c.micro_batch == 4 && strstr(warnings, "old form"),
          "zero_optimization: true -> stage %d, warnings '%s'", c.stage, warnings);
}

/* Flags come from the key table; --print-config's JSON parses with a JSON library. */
static void test_flags(void) {
    CHECK(zero__train_config_flag_key("--stage") &&
              !strcmp(zero__train_config_flag_key("--stage"), "zero_optimization.stage"),
          "--stage");
    CHECK(zero__train_config_flag_key("--ranks") && zero__train_config_flag_key("--backend") &&
              zero__train_config_flag_key("--steps") && !zero__train_config_flag_key("--nope"),
          "flags");
    zero_train_config_t c;
    zero__train_config_default(&c);
    CHECK(zero__train_config_set(&c, "zero_optimization.stage", "4") == ZERO_ERR_CONFIG &&
              strstr(zero_last_error(), "zero_optimization.stage = 4"),
          "--stage 4: '%s'", zero_last_error());
    CHECK(zero__train_config_set(&c, "train.backend", "MPI") == ZERO_OK &&
              !strcmp(c.backend, "mpi") && zero__train_config_is_set(&c, "train.backend"),
          "backend canonical spelling");
}

/* Every key of the table is documented in docs/config.md (path given by CTest). */
static void test_docs(const char *path) {
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL, "cannot open %s", path);
    if (!f) return;
    char *doc = calloc(1, 1 << 20);
    size_t n = fread(doc, 1, (1 << 20) - 1, f);
    doc[n] = 0;
    fclose(f);
    char *table = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&table, &len);
    zero__train_config_print_markdown(m);
    fclose(m);
    CHECK(strstr(doc, table) != NULL,
          "docs/config.md does not hold the current key table: regenerate it with "
          "`zero train --config-doc`");
    free(table);
    free(doc);
}

/* The threads a run keeps busy on this machine, which picks the OpenMP wait policy: ranks x
 * threads when both are given, the cores shared out when threads is 0 (auto), mpirun's local
 * rank count under the MPI backend. */
static void test_machine_threads(void) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    zero_train_config_t c;
    zero__train_config_default(&c);
    CHECK(zero__train_config_set(&c, "train.backend", "threads") == ZERO_OK, "backend");
    zero__train_config_set(&c, "train.ranks", "3");
    zero__train_config_set(&c, "train.threads", "2");
    CHECK(zero__train_machine_threads(&c) == 6, "3 ranks x 2 threads: %d",
          zero__train_machine_threads(&c));
    zero__train_config_set(&c, "train.threads", "0");
    long per = cores / 3 < 1 ? 1 : cores / 3;
    CHECK(zero__train_machine_threads(&c) == 3 * per, "3 ranks, auto threads on %ld cores: %d",
          cores, zero__train_machine_threads(&c));
    zero__train_config_set(&c, "train.ranks", "1");
    CHECK(zero__train_machine_threads(&c) == cores, "1 rank, auto threads: %d of %ld cores",
          zero__train_machine_threads(&c), cores);
    /* swap files on NVMe: each rank's aio threads (intra_op_parallelism) count too */
    zero__train_config_set(&c, "train.ranks", "2");
    zero__train_config_set(&c, "train.threads", "2");
    zero__train_config_set(&c, "aio.intra_op_parallelism", "3");
    CHECK(zero__train_machine_threads(&c) == 4, "aio threads without offload: %d",
          zero__train_machine_threads(&c));
    zero__train_config_set(&c, "zero_optimization.stage", "3");
    zero__train_config_set(&c, "zero_optimization.offload_param.device", "nvme");
    CHECK(zero__train_machine_threads(&c) == 2 * (2 + 3), "param offload: %d",
          zero__train_machine_threads(&c));
    zero__train_config_set(&c, "zero_optimization.offload_param.device", "cpu");
    zero__train_config_set(&c, "zero_optimization.offload_optimizer.device", "nvme");
    CHECK(zero__train_machine_threads(&c) == 2 * (2 + 3), "optimizer offload: %d",
          zero__train_machine_threads(&c));
}

/* What an absent key means is what it means under DeepSpeed (deepspeed/runtime/constants.py,
 * lr_schedules.py, FusedAdam): no scheduler block keeps the optimizer's lr constant, no
 * gradient_clipping clips nothing, Adam's betas are (0.9, 0.999) and weight_decay 0; a
 * reduce_bucket_size of 0 is valid. Checked on the engine parameters the trainer builds. */
static void test_absent_keys(void) {
    zero_train_config_t c;
    CHECK(parse_check(&c, "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.0002}}}",
                      1) == ZERO_OK,
          "parse: %s", zero_last_error());
    zero_engine_params_t ep = zero_engine_params_default();
    CHECK(zero__train_config_engine_params(&c, &ep) == ZERO_OK, "map: %s", zero_last_error());
    CHECK(ep.schedule == ZERO_LR_CONSTANT && ep.warmup_steps == 0 && ep.lr == 0.0002f &&
              ep.min_lr == 0.0002f,
          "no scheduler: schedule %d warmup %d lr %g min %g", (int)ep.schedule, ep.warmup_steps,
          (double)ep.lr, (double)ep.min_lr);
    CHECK(ep.grad_clip == 0.0f, "no gradient_clipping: clip %g", (double)ep.grad_clip);
    CHECK(ep.beta1 == 0.9f && ep.beta2 == 0.999f && ep.weight_decay == 0.0f && ep.eps == 1e-8f,
          "Adam defaults: betas (%g, %g) wd %g eps %g", (double)ep.beta1, (double)ep.beta2,
          (double)ep.weight_decay, (double)ep.eps);
    /* A scheduler block without its optional params: DeepSpeed's WarmupLR defaults (peak 0.001
     * whatever the optimizer says, 1000 log-shaped warm-up steps from 0). */
    CHECK(
        parse_check(&c,
                    "{\"optimizer\": {\"params\": {\"lr\": 0.0002}}, \"scheduler\": "
                    "{\"type\": \"WarmupLR\"}, \"zero_optimization\": {\"reduce_bucket_size\": 0}}",
                    1) == ZERO_OK &&
            zero__train_config_engine_params(&c, &ep) == ZERO_OK,
        "WarmupLR: %s", zero_last_error());
    CHECK(ep.schedule == ZERO_LR_CONSTANT && ep.lr == 0.001f && ep.warmup_steps == 1000 &&
              ep.warmup_type == ZERO_WARMUP_LOG && ep.warmup_min_lr == 0.0f,
          "WarmupLR defaults: lr %g warmup %d type %d", (double)ep.lr, ep.warmup_steps,
          (int)ep.warmup_type);
    CHECK(c.reduce_bucket_elems == 0 && ep.reduce_bucket_bytes >= 1 && ep.reduce_bucket_bytes < 4,
          "reduce_bucket_size 0: %zu bytes", ep.reduce_bucket_bytes);
    /* WarmupCosineLR: cos_min_ratio 0.0001 and warmup_min_ratio 0 by default. */
    CHECK(parse_check(&c,
                      "{\"optimizer\": {\"params\": {\"lr\": 0.01}}, \"scheduler\": {\"type\": "
                      "\"WarmupCosineLR\", \"params\": {\"total_num_steps\": 50}}}",
                      1) == ZERO_OK &&
              zero__train_config_engine_params(&c, &ep) == ZERO_OK,
          "WarmupCosineLR: %s", zero_last_error());
    CHECK(ep.schedule == ZERO_LR_COSINE && ep.lr == 0.01f &&
              fabsf(ep.min_lr - 0.01f * 0.0001f) <= 1e-12f && ep.warmup_steps == 1000 &&
              ep.total_steps == 50 && ep.warmup_min_lr == 0.0f,
          "WarmupCosineLR defaults: min %g warmup %d total %d", (double)ep.min_lr, ep.warmup_steps,
          ep.total_steps);
    /* overlap_comm (deepspeed/runtime/zero/config.py): absent, true at stage 3 only; a value
     * given is kept at every stage. */
    for (int stage = 0; stage <= 3; stage++) {
        char text[160];
        snprintf(text, sizeof text, "{\"zero_optimization\": {\"stage\": %d}}", stage);
        CHECK(parse_check(&c, text, 1) == ZERO_OK, "stage %d: %s", stage, zero_last_error());
        CHECK(c.overlap_comm == (stage == 3), "stage %d: absent overlap_comm is %d", stage,
              c.overlap_comm);
        snprintf(text, sizeof text,
                 "{\"zero_optimization\": {\"stage\": %d, \"overlap_comm\": %s}}", stage,
                 stage == 3 ? "false" : "true");
        CHECK(parse_check(&c, text, 1) == ZERO_OK, "stage %d: %s", stage, zero_last_error());
        CHECK(c.overlap_comm == (stage != 3), "stage %d: given overlap_comm is %d", stage,
              c.overlap_comm);
    }
}

/* Duplicate keys (an error naming both lines and the full path), DeepSpeed's other spellings,
 * values zero already does (silent) and those it does not (a warning), "auto" (the value chosen
 * is said), the activation_checkpointing block, a key DeepSpeed rejects, and the command line's
 * keys skipping the file's values. */
static void test_deepspeed_spellings(void) {
    zero_train_config_t c;
    zero__train_config_default(&c);
    zero_status_t st =
        zero__train_config_parse(&c,
                                 "{\n  \"zero_optimization\": {\n    \"stage\": 2,\n"
                                 "    \"overlap_comm\": true,\n    \"stage\": 3\n  }\n}\n",
                                 "dup.json");
    CHECK(st == ZERO_ERR_CONFIG && strstr(zero_last_error(), "dup.json:5:") &&
              strstr(zero_last_error(), "'zero_optimization.stage'") &&
              strstr(zero_last_error(), "first at line 3"),
          "duplicate key: '%s'", zero_last_error());
    /* equal names in different objects, and in strings, are not duplicates */
    zero__train_config_default(&c);
    st =
        zero__train_config_parse(&c,
                                 "{\"fp16\": {\"enabled\": false}, \"bf16\": {\"enabled\": false}, "
                                 "\"data\": {\"path\": \"enabled\\\"enabled\"}}",
                                 "nodup.json");
    CHECK(st == ZERO_OK, "same name in two objects: %s", zero_last_error());
    st = zero__train_config_parse(
        &c, "{\"a\": [{\"x\": 1}, {\"x\": 2}], \"b\": {\"x\": 1, \"x\": 2}}", "arr.json");
    CHECK(st == ZERO_ERR_CONFIG && strstr(zero_last_error(), "'b.x'"),
          "duplicate after arrays: '%s'", zero_last_error());

    warnings[0] = 0;
    CHECK(parse_check(
              &c,
              "{\"bfloat16\": {\"enabled\": true},\n"
              " \"optimizer\": {\"params\": {\"adam_w_mode\": true, \"amsgrad\": true}},\n"
              " \"zero_optimization\": {\"allgather_partitions\": true, "
              "\"max_live_parameters\": 77, \"mics_shard_size\": 4, \"zeropp_loco_param\": null,\n"
              "   \"stage3_model_persistence_threshold\": 5, \"cpu_offload\": false},\n"
              " \"dataloader_drop_last\": false, \"fp32_reduce_scatter\": false,\n"
              " \"activation_checkpointing\": {\"cpu_checkpointing\": true},\n"
              " \"wall_clock_breakdown\": true, \"wandb\": {\"enabled\": true},\n"
              " \"gradient_clipping\": \"auto\", \"train_batch_size\": \"auto\"}",
              2) == ZERO_OK,
          "spellings: %s", zero_last_error());
    CHECK(c.bf16 == 1 && zero__train_config_compute_dtype(&c) == ZERO_DTYPE_BF16,
          "bfloat16 -> bf16 compute");
    CHECK(c.max_live_elems == 77, "max_live_parameters -> stage3_max_live_parameters");
    CHECK(c.checkpointing == 1, "activation_checkpointing block -> model.activation_checkpointing");
    CHECK(c.train_batch_size == 32 && c.micro_batch == 16, "train_batch_size auto: %d",
          c.train_batch_size);
    const char *want[] = {"'bfloat16' is DeepSpeed's other name of 'bf16'",
                          "'optimizer.params.amsgrad' = true ignored: not supported yet",
                          "'zero_optimization.mics_shard_size' = 4 ignored",
                          "'activation_checkpointing.cpu_checkpointing' ignored",
                          "'wall_clock_breakdown': step and optimizer-step times",
                          "'wandb' ignored: not supported yet",
                          "gradient_clipping = \"auto\": 0 chosen",
                          "train_batch_size = \"auto\": 32 chosen"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK(strstr(warnings, want[i]) != NULL, "no '%s' in:\n%s", want[i], warnings);
    const char *silent[] = {"adam_w_mode", "allgather_partitions", "model_persistence",
                            "cpu_offload", "dataloader_drop_last", "fp32_reduce_scatter",
                            "unknown"};
    for (size_t i = 0; i < sizeof silent / sizeof silent[0]; i++)
        CHECK(strstr(warnings, silent[i]) == NULL, "'%s' should be silent:\n%s", silent[i],
              warnings);

    /* "bf16" and the legacy "bfloat16" both given: DeepSpeed reads "bf16", in either order */
    warnings[0] = 0;
    CHECK(parse_check(&c, "{\"bfloat16\": {\"enabled\": true}, \"bf16\": {\"enabled\": false}}",
                      1) == ZERO_OK &&
              c.bf16 == 0 && strstr(warnings, "'bfloat16' ignored: 'bf16' is given too"),
          "bfloat16 before bf16: bf16 %d, '%s'", c.bf16, warnings);
    CHECK(parse_check(&c, "{\"bf16\": {\"enabled\": false}, \"bfloat16\": {\"enabled\": true}}",
                      1) == ZERO_OK &&
              c.bf16 == 0,
          "bfloat16 after bf16: bf16 %d", c.bf16);
    /* an explicit model.activation_checkpointing wins over the block, wherever it is */
    CHECK(parse_check(&c,
                      "{\"model\": {\"activation_checkpointing\": false}, "
                      "\"activation_checkpointing\": {\"partition_activations\": false}}",
                      1) == ZERO_OK &&
              c.checkpointing == 0,
          "model.activation_checkpointing false kept");
    /* "auto" derived from other keys: HF's formulas from hidden_size and the lr */
    CHECK(parse_check(
              &c,
              "{\"model\": {\"dim\": 64, \"heads\": 4}, \"optimizer\": {\"params\": "
              "{\"lr\": 0.004}}, \"scheduler\": {\"type\": \"WarmupLR\", \"params\": "
              "{\"warmup_max_lr\": \"auto\"}}, \"zero_optimization\": {\"reduce_bucket_size\": "
              "\"auto\", \"stage3_prefetch_bucket_size\": \"auto\", "
              "\"stage3_param_persistence_threshold\": \"auto\"}}",
              1) == ZERO_OK,
          "derived auto: %s", zero_last_error());
    CHECK(c.warmup_max_lr == 0.004f && c.reduce_bucket_elems == 64 * 64 &&
              c.prefetch_bucket_elems == (int64_t)(0.9 * 64 * 64) &&
              c.persistence_threshold_elems == 640,
          "derived auto: max_lr %g bucket %lld prefetch %lld persist %lld", (double)c.warmup_max_lr,
          (long long)c.reduce_bucket_elems, (long long)c.prefetch_bucket_elems,
          (long long)c.persistence_threshold_elems);
    st = parse_check(&c, "{\"optimizer\": {\"params\": {\"max_grad_norm\": 1.0}}}", 1);
    CHECK(st == ZERO_ERR_CONFIG && strstr(zero_last_error(), "optimizer.params.max_grad_norm") &&
              strstr(zero_last_error(), "gradient_clipping"),
          "max_grad_norm: '%s'", zero_last_error());

    /* the command line's keys: the file's value is skipped unchecked, others still checked */
    zero__train_config_default(&c);
    CHECK(zero__train_config_mark_cli(&c, "zero_optimization.stage") == ZERO_OK &&
              zero__train_config_mark_cli(&c, "bf16.enabled") == ZERO_OK,
          "mark_cli");
    CHECK(zero__train_config_mark_cli(&c, "nope.key") == ZERO_ERR_CONFIG &&
              strstr(zero_last_error(), "nope.key"),
          "mark_cli unknown");
    CHECK(zero__train_config_parse(&c,
                                   "{\"zero_optimization\": {\"stage\": 9}, \"bfloat16\": "
                                   "{\"enabled\": \"yes\"}}",
                                   "cli.json") == ZERO_OK &&
              c.stage == 0 && c.bf16 == 0,
          "the file's values for the command line's keys are skipped: %s", zero_last_error());
    CHECK(zero__train_config_parse(&c, "{\"model\": {\"layers\": 0}}", "cli.json") ==
              ZERO_ERR_CONFIG,
          "other keys are still checked");
}

/* zero_ds_config_load (include/zero/config.h): the trainer's reader and mapping behind a public
 * call; the caller's comm, threads and seed survive, a failure leaves *out as it was. */
static void test_public_load(void) {
    char path[] = "/tmp/zero-test-dsconfig-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) return;
    const char *json = "{\"train_batch_size\": 8, \"gradient_accumulation_steps\": 4,\n"
                       " \"seed\": 99, \"gradient_clipping\": 0.7,\n"
                       " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 3e-4, "
                       "\"betas\": [0.8, 0.9], \"eps\": 1e-6, \"weight_decay\": 0.05}},\n"
                       " \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {"
                       "\"warmup_min_lr\": 1e-5, \"warmup_max_lr\": 2e-4, \"warmup_num_steps\": 7, "
                       "\"total_num_steps\": 70, \"warmup_type\": \"linear\"}},\n"
                       " \"fp16\": {\"enabled\": true, \"loss_scale_window\": 500},\n"
                       " \"zero_optimization\": {\"stage\": 2, \"reduce_bucket_size\": 1000,\n"
                       "   \"overlap_comm\": false, \"stage3_prefetch_bucket_size\": 123,\n"
                       "   \"stage3_param_persistence_threshold\": 45, "
                       "\"stage3_max_live_parameters\": 6789, \"zero_quantized_weights\": true,\n"
                       "   \"zero_quantized_gradients\": true, \"zeropp_loco_param\": "
                       "{\"err_beta\": 0.5, \"reset_T\": 7}}}\n";
    CHECK(write(fd, json, strlen(json)) == (ssize_t)strlen(json), "write");
    close(fd);
    zero_engine_params_t p = zero_engine_params_default();
    p.threads = 3;
    p.seed = 42;
    CHECK(zero_ds_config_load(path, &p) == ZERO_OK, "load: %s", zero_last_error());
    CHECK(p.threads == 3 && p.seed == 42 && p.comm == NULL, "caller's fields: threads %d seed %llu",
          p.threads, (unsigned long long)p.seed);
    CHECK(p.stage == 2 && p.grad_accum_steps == 4 && p.grad_clip == 0.7f,
          "stage %d accum %d clip %g", p.stage, p.grad_accum_steps, (double)p.grad_clip);
    CHECK(p.beta1 == 0.8f && p.beta2 == 0.9f && p.eps == 1e-6f && p.weight_decay == 0.05f,
          "optimizer");
    CHECK(p.schedule == ZERO_LR_LINEAR && p.lr == 2e-4f && p.min_lr == 1e-5f &&
              p.warmup_min_lr == 1e-5f && p.warmup_steps == 7 && p.total_steps == 70 &&
              p.warmup_type == ZERO_WARMUP_LINEAR,
          "scheduler: lr %g min %g", (double)p.lr, (double)p.min_lr);
    CHECK(p.compute_dtype == ZERO_DTYPE_FP16 && p.loss_scaler.loss_scale_window == 500,
          "fp16 and its scaler");
    CHECK(p.reduce_bucket_bytes == 4000 && p.overlap_comm == 0 && p.prefetch_bucket_elems == 123 &&
              p.persistence_threshold_elems == 45 && p.max_live_elems == 6789 &&
              p.quantized_weights == 1,
          "zero_optimization: bucket %zu bytes, qwZ %d", p.reduce_bucket_bytes,
          p.quantized_weights);
    CHECK(p.quantized_gradients == 1 && p.loco == 1 && p.loco_err_beta == 0.5f &&
              p.loco_reset_t == 7,
          "qgZ %d, LoCo %d (%g, %d)", p.quantized_gradients, p.loco, (double)p.loco_err_beta,
          p.loco_reset_t);
    /* a failure changes nothing */
    zero_engine_params_t before = p;
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"zero_optimization\": {\"stage\": 4}}\n");
    fclose(f);
    CHECK(zero_ds_config_load(path, &p) == ZERO_ERR_CONFIG &&
              strstr(zero_last_error(), "zero_optimization.stage = 4") &&
              !memcmp(&before, &p, sizeof p),
          "bad stage: '%s'", zero_last_error());
    CHECK(zero_ds_config_load("/nonexistent/ds.json", &p) == ZERO_ERR_IO &&
              !memcmp(&before, &p, sizeof p),
          "missing file");
    CHECK(zero_ds_config_load(NULL, &p) == ZERO_ERR_INVALID_ARG, "NULL path");
    unlink(path);
}

int main(int argc, char **argv) {
    zero_log_set_callback(capture, NULL);
    test_values();
    test_errors();
    test_set();
    test_invalid_cases();
    test_moe();
    test_batch_sizes();
    test_deepspeed_example();
    test_flags();
    test_legacy_zero();
    test_mixed_precision();
    test_state_dtype();
    test_onebit();
    test_fp8();
    test_machine_threads();
    test_absent_keys();
    test_public_load();
    test_deepspeed_spellings();
    if (argc > 1) test_docs(argv[1]);
    return check_report();
}
