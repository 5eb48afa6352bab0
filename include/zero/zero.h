/* zero/zero.h — the umbrella header of the zero library: include this one. */
#ifndef ZERO_ZERO_H
#define ZERO_ZERO_H

#include "zero/core.h"
#include "zero/comm.h"
#include "zero/engine.h"
#include "zero/ckpt.h"
#include "zero/optim.h"
#include "zero/config.h"
#include "zero/generate.h"
#include "zero/tokenizer.h"

#endif /* ZERO_ZERO_H */
