// Forwarding header: the dense logits kernel lives in sm90_fp8_mqa_logits.cuh.
#pragma once
#include "sm90_fp8_mqa_logits.cuh"
